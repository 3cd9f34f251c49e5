// HaulCore's public surface is only the value types the Haul module re-exports: HaulError, Checksum,
// TransferProgress, NetworkPath, NetworkInterfaceInfo and InterfaceKind. Everything else is
// `package`: see docs/public-api.md.
