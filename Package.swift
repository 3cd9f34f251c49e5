// swift-tools-version:6.2
import PackageDescription

// Shared settings, applied to every Swift target in a loop (as AsyncHTTPClient does).
// CI (CI=true) treats warnings as errors; local builds only warn.
var swiftSettings: [SwiftSetting] = []
if Context.environment["CI"] == "true" || Context.environment["HAUL_WERROR"] == "1" {
    swiftSettings.append(.treatAllWarnings(as: .error))
}

let package = Package(
    name: "Haul",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "Haul", targets: ["Haul"]),
        .library(name: "HaulTestSupport", targets: ["HaulTestSupport"]),
        .executable(name: "haul", targets: ["HaulCLI"]),
    ],
    targets: [
        // Our own declarations of the few libcurl symbols we use; libcurl is dlopen()ed at run
        // time, so building needs no curl headers or -dev package.
        .target(
            name: "CHaulCurl",
            linkerSettings: [.linkedLibrary("dl", .when(platforms: [.linux]))]
        ),
        .target(name: "HaulCore", dependencies: ["CHaulCurl"]),
        .target(name: "Haul", dependencies: ["HaulCore"]),
        .target(name: "HaulTestSupport", dependencies: ["HaulCore"]),
        .executableTarget(name: "HaulCLI", dependencies: ["Haul", "HaulCore", "HaulTestSupport"]),
        .testTarget(name: "HaulCoreTests", dependencies: ["HaulCore", "HaulTestSupport"]),
        .testTarget(name: "HaulTests", dependencies: ["Haul", "HaulCore", "HaulTestSupport"]),
        .testTarget(name: "HaulCLITests", dependencies: ["HaulCLI", "HaulTestSupport", "HaulCore"]),
    ],
    swiftLanguageModes: [.v6]
)

for target in package.targets where target.type != .system && target.name != "CHaulCurl" {
    target.swiftSettings = (target.swiftSettings ?? []) + swiftSettings
}
