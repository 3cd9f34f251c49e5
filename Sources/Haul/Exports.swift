@_exported import struct HaulCore.HaulError
@_exported import struct HaulCore.TransferProgress
