//go:build race

package serve

// raceDetector is true under -race, whose slowdown changes the timing that
// some live tests are about.
const raceDetector = true
