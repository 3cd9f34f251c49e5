// The test server is a target of its own, so that `haul demo` links it without the rest of
// the test support; tests that import HaulTestSupport see it as before.
@_exported import HaulTestServer
