// Package e2e holds end-to-end tests of the gateway in front of live
// simulator replicas (package sim's HTTP servers on 127.0.0.1) with injected
// faults. It has no non-test code; it is a separate package so that the
// gateway itself does not depend on the simulator.
package e2e
