// Package cli is ttft's command line: commands, flags turned into option
// structs, validation and exit codes. Process state (args, streams,
// environment) is injected through Env so tests run commands in-process.
package cli
