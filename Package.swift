// swift-tools-version:6.2
import PackageDescription

#if canImport(Glibc)
    import Glibc
#endif

// Shared settings, applied to every Swift target in a loop (as AsyncHTTPClient does).
// CI (CI=true) treats warnings as errors; local builds only warn.
var swiftSettings: [SwiftSetting] = []
if Context.environment["CI"] == "true" || Context.environment["HAUL_WERROR"] == "1" {
    swiftSettings.append(.treatAllWarnings(as: .error))
}
// Every function in a section of its own in release builds on Linux (Swift gives one only to
// public functions otherwise: closures, async parts and private helpers share one per file), so
// that the release `haul`'s link can place the functions a run executes together (Link/haul.order,
// docs/startup.md). SwiftPM takes unsafe flags in versioned dependencies since tools version 6.2.
swiftSettings.append(
    .unsafeFlags(["-Xfrontend", "-function-sections"], .when(platforms: [.linux], configuration: .release)))
// Generic types' metadata by accessor calls, not by mangled name, in release builds on Linux
// (measured there only): a name is decoded at a type's first use, and the decoder checks its
// requirements (`Key: Hashable`) by scanning every conformance in the binary (docs/startup.md).
swiftSettings.append(
    .unsafeFlags(
        ["-Xfrontend", "-disable-concrete-type-metadata-mangled-name-accessors"],
        .when(platforms: [.linux], configuration: .release)))

// The release `haul`'s link (docs/startup.md). The Swift runtime inside it, always on Linux. With
// a glibc of 2.36 or later on the building machine (the one that runs what it builds), also lld
// with the functions a run executes placed together (Link/haul.order, made by
// scripts/link-order.sh) and packed relative relocations, which only such a glibc can load.
// -static-stdlib exports the executable's own symbols (-export-dynamic), which nothing loads
// against; the runtime's dladdr at every start then scans 5,000 of them. --no-export-dynamic
// keeps them private.
var releaseLinkFlags = [
    "-static-stdlib", "-Xlinker", "--no-export-dynamic",
    "-Xlinker", "-l_FoundationCShims", "-Xlinker", "-l_FoundationCollections",
]
#if canImport(Glibc)
    // confstr gives "glibc 2.36"; nothing (another C library) leaves the list empty.
    var glibcName = [CChar](repeating: 0, count: 64)
    let glibcLength = confstr(Int32(_CS_GNU_LIBC_VERSION), &glibcName, glibcName.count)
    let glibc = glibcLength > 0 ? String(cString: glibcName).split(separator: " ").last ?? "" : ""
    let glibcVersion = glibc.split(separator: ".").compactMap { Int($0) }
    if glibcVersion.count >= 2, !glibcVersion.lexicographicallyPrecedes([2, 36]) {
        releaseLinkFlags += [
            "-use-ld=lld", "-Xlinker", "-z", "-Xlinker", "pack-relative-relocs",
            "-Xlinker", "--symbol-ordering-file",
            "-Xlinker", "\(Context.packageDirectory)/Sources/HaulCLI/Link/haul.order",
            "-Xlinker", "--no-warn-symbol-ordering",
        ]
    }
#endif

let package = Package(
    name: "Haul",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "Haul", targets: ["Haul"]),
        // The URLSession transport, apart: it links FoundationNetworking, which `Haul` never loads.
        .library(name: "HaulFoundation", targets: ["HaulFoundation"]),
        .executable(name: "haul", targets: ["HaulCLI"]),
    ],
    targets: [
        // Our own declarations of the few libcurl symbols we use; libcurl is dlopen()ed at run
        // time, so building needs no curl headers or -dev package.
        // HAUL_TEST_HOOKS: what only tests may steer (which libcurl to load), never in a release.
        .target(
            name: "CHaulCurl",
            cSettings: [.define("HAUL_TEST_HOOKS", .when(configuration: .debug))],
            linkerSettings: [.linkedLibrary("dl", .when(platforms: [.linux]))]
        ),
        .target(name: "HaulCore", dependencies: ["CHaulCurl"]),
        // The command's own start: libcurl starts loading before Swift's runtime and `main`.
        .target(name: "CHaulStart", dependencies: ["CHaulCurl"]),
        .target(name: "Haul", dependencies: ["HaulCore"]),
        .target(name: "HaulFoundation", dependencies: ["Haul", "HaulCore"]),
        // `haul serve`: the doors' checks, the store, the HTTP server, the API and the daemon
        // that runs its downloads on one DownloadManager.
        .target(name: "HaulServer", dependencies: ["Haul", "HaulCore", "CHaulSQLite", "CHaulEvent"]),
        // libevent's evhttp for the daemon's HTTP, dlopen()ed as libcurl is.
        .target(name: "CHaulEvent", linkerSettings: [.linkedLibrary("dl", .when(platforms: [.linux]))]),
        // SQLite for the daemon's store, dlopen()ed as libcurl is: only `haul serve` loads it.
        .target(name: "CHaulSQLite", linkerSettings: [.linkedLibrary("dl", .when(platforms: [.linux]))]),
        // The misbehaving local server of the tests and of `haul demo` (which links it alone).
        .target(name: "HaulTestServer", dependencies: ["HaulCore"]),
        .target(name: "HaulTestSupport", dependencies: ["HaulCore", "HaulTestServer"]),
        // A Swift Testing trait every suite carries (it imports Testing, so it is kept out of the
        // support targets).
        .target(name: "HaulTestTraits"),
        // A release `haul` carries Swift's runtime and FoundationEssentials inside it (Swift's
        // -static-stdlib): a start then maps six libraries instead of nineteen (docs/startup.md).
        // Debug builds (the tests) link them as shared libraries, as the test runner does.
        .executableTarget(
            name: "HaulCLI", dependencies: ["Haul", "HaulCore", "HaulServer", "HaulTestServer", "CHaulStart"],
            exclude: ["Link"],
            linkerSettings: [
                .unsafeFlags(releaseLinkFlags, .when(platforms: [.linux], configuration: .release))
            ]
        ),
        // Examples/: one small program per way to use the library, built with the package and run
        // against the test server by HaulCLITests.
        .executableTarget(name: "OneShotExample", dependencies: ["Haul"], path: "Examples/OneShot"),
        .executableTarget(name: "StreamingExample", dependencies: ["Haul"], path: "Examples/Streaming"),
        .executableTarget(name: "DownloadFileExample", dependencies: ["Haul"], path: "Examples/DownloadFile"),
        .executableTarget(name: "TaskControlExample", dependencies: ["Haul"], path: "Examples/TaskControl"),
        .executableTarget(name: "ManagerExample", dependencies: ["Haul"], path: "Examples/Manager"),
        .executableTarget(name: "BackgroundExample", dependencies: ["Haul"], path: "Examples/Background"),
        // The code of the DocC articles (Sources/Haul/Haul.docc), compiled; DocCSnippetTests checks it is theirs.
        .executableTarget(name: "SnippetsExample", dependencies: ["Haul"], path: "Examples/Snippets"),
        .executableTarget(name: "ResumeWalkthrough", dependencies: ["Haul"], path: "Examples/ResumeWalkthrough"),
        .testTarget(
            name: "HaulCoreTests", dependencies: ["HaulCore", "HaulFoundation", "HaulTestSupport", "HaulTestTraits"]),
        .testTarget(
            name: "HaulServerTests", dependencies: ["HaulServer", "HaulCore", "HaulTestSupport", "HaulTestTraits"]
        ),
        .testTarget(
            name: "HaulTests",
            dependencies: ["Haul", "HaulCore", "HaulFoundation", "HaulTestSupport", "HaulTestTraits"]),
        // Golden/: the expected output of GoldenOutputTests, read from the source tree.
        .testTarget(
            name: "HaulCLITests", dependencies: ["HaulCLI", "Haul", "HaulTestSupport", "HaulCore", "HaulTestTraits"],
            exclude: ["Golden"]),
    ],
    swiftLanguageModes: [.v6]
)

for target in package.targets where target.type != .system && !target.name.hasPrefix("CHaul") {
    target.swiftSettings = (target.swiftSettings ?? []) + swiftSettings
}
