package httpx

import "testing"

// framingConn (ServeStd's framing check) follows pipelined
// requests of every legitimate shape however the reads cut them, and
// flags the ambiguous one.
func TestFramingConnFollowsRequests(t *testing.T) {
	legit := "GET /healthz HTTP/1.1\r\nHost: h\r\n\r\n" +
		"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello" +
		"POST /b HTTP/1.1\r\nHost: h\r\ntransfer-encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\nA\r\n0123456789\r\n0\r\nX-Trailer: t\r\n\r\n" +
		"POST /c HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc" +
		"POST /c HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n" + // net/http ignores it: no body
		"POST /d HTTP/1.1\nHost: h\nContent-Length: 3\n\nxyz"
	ambiguous := "POST /e HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
	for step := 1; step <= len(legit); step++ {
		fc := &framingConn{cl: -1, first: true}
		for i := 0; i < len(legit); i += step {
			fc.follow([]byte(legit[i:min(i+step, len(legit))]))
		}
		if fc.bad.Load() || fc.state != frameHead || !fc.first {
			t.Fatalf("reads of %d bytes: bad=%v state=%d first=%v", step, fc.bad.Load(), fc.state, fc.first)
		}
		fc.follow([]byte(ambiguous))
		if !fc.bad.Load() {
			t.Fatalf("reads of %d bytes: the ambiguous head was not flagged", step)
		}
	}
}
