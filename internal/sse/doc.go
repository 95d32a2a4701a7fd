// Package sse reads Server-Sent Events streams as the WHATWG spec defines
// them (LF, CRLF and CR line ends, comments, multi-line data, event/id/retry
// fields), stamping each event with the time the socket read that completed
// it returned. It knows nothing of providers; see package wire for those.
package sse
