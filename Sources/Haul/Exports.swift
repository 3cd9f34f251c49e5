@_exported import struct HaulCore.Checksum
@_exported import struct HaulCore.HaulError
@_exported import enum HaulCore.InterfaceKind
@_exported import struct HaulCore.NetworkInterfaceInfo
@_exported import struct HaulCore.NetworkPath
@_exported import struct HaulCore.TransferProgress
