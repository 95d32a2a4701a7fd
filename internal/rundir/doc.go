// Package rundir is the life of a run directory — the files a run leaves for
// `ttft report`, `compare` and `runs import`: created with its manifest
// (secrets redacted), fed record by record as requests finish (written
// through, so a crash loses nothing that finished), and finished with its
// summary. `ttft bench`, `ttft sim run` and `ttft gateway --records` all
// make theirs here, so the file names and the order of writes are in one
// place.
package rundir
