//go:build !linux

package bench

import "net"

// enableRXStamps: kernel receive timestamps are read on Linux only;
// elsewhere event times are taken when the read returns.
func enableRXStamps(*net.TCPConn) (net.Conn, bool) { return nil, false }
