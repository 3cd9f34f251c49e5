import Testing

@testable import HaulCore

@Suite("Destination claims: one download per file")
struct DestinationClaimsTests {
    @Test func anotherOwnerIsRefusedTheSameFileSpelledDifferently() throws {
        let claims = DestinationClaims()
        let first = DestinationClaims.Owner()
        let second = DestinationClaims.Owner()
        try claims.claim("/tmp/x/dir/file.bin", for: first)
        for spelling in ["/tmp/x/dir/file.bin", "/tmp/x/dir/./file.bin", "/tmp/x/other/../dir/file.bin"] {
            let error = #expect(throws: HaulError.self) { try claims.claim(spelling, for: second) }
            #expect(error?.code == .destinationInUse)
            #expect(error?.path == spelling)
        }
        try claims.claim("/tmp/x/dir/other.bin", for: second)
    }

    @Test func theOwnerMayClaimAgainAndReleasingFreesEverything() throws {
        let claims = DestinationClaims()
        let owner = DestinationClaims.Owner()
        try claims.claim("/tmp/y/a.bin", for: owner)
        try claims.claim("/tmp/y/a.bin", for: owner)  // a segmented download handing over
        try claims.claim("/tmp/y/b.bin", for: owner)
        claims.releaseAll(of: owner)
        #expect(!claims.isClaimed("/tmp/y/a.bin") && !claims.isClaimed("/tmp/y/b.bin"))
        try claims.claim("/tmp/y/a.bin", for: DestinationClaims.Owner())
    }

    @Test func releasingDoesNotFreeAnotherOwnersFile() throws {
        let claims = DestinationClaims()
        let holder = DestinationClaims.Owner()
        let refused = DestinationClaims.Owner()
        try claims.claim("/tmp/z/f.bin", for: holder)
        #expect(throws: HaulError.self) { try claims.claim("/tmp/z/f.bin", for: refused) }
        claims.releaseAll(of: refused)
        #expect(claims.isClaimed("/tmp/z/f.bin"))
    }
}
