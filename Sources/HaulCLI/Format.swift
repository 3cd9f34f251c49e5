import HaulCore

/// The number formats of the output, shared with the library's diagnosis findings.
typealias Format = HaulCore.Format
