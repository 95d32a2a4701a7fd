// Package httpx is a lean HTTP/1.1 server and client for proxies on hot
// paths, with their I/O on the goroutine of the request they serve:
//
//   - Server (server.go): one goroutine per client connection, no other
//     goroutine, timer or deadline system call per request; timeouts and
//     client hang-ups are found by one sweeper per server. Responses are
//     framed by the server (headers with the first body bytes in one
//     write; BodyFinisher sends the last bytes with the chunked terminator),
//     a streaming connection's send buffer is bounded so that a client
//     that stops reading is timed out, and ambiguous framing is refused
//     (FuzzServerRequest checks the parser against net/http's).
//   - ServeStd (nethttp.go): net/http.Server with the same framing checks,
//     for those who prefer Go's server.
//   - Client (client.go): plain-http requests written and answers read on
//     the caller's goroutine, with a per-address idle pool that is dropped
//     whole when a server turns out to have restarted.
//
// It knows nothing of what it carries: ttft's gateway (internal/gateway)
// constructs a Server or ServeStd for its clients and a Client for its
// plain-http backends, each from its own options.
package httpx
