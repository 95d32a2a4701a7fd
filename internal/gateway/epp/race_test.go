//go:build race

package epp

const raceEnabled = true
