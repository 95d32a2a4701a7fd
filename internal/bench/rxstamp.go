package bench

import (
	"context"
	"crypto/tls"
	"net"
	"time"
)

// Event arrival times come from the kernel where it can say: a TCP socket
// with SO_TIMESTAMPNS reports, with every read, when the last segment read
// entered the host's network stack. The measured first-token time is then
// when the bytes arrived, not when the Go scheduler got round to running the
// reading goroutine — under load that wake-up is the whole of a client's
// added error (tens of µs idle, milliseconds with a thousand streams on two
// cores). The user-space read delay is still recorded beside it
// (first_token_read_delay_ms), so it can be seen and checked.

// rxStamper is a connection that knows when its latest read's bytes arrived.
type rxStamper interface {
	// lastRX is the kernel receive time, in Unix nanoseconds, of the last
	// byte of the most recent read; 0 when unknown.
	lastRX() int64
	// markRequest notes that the transport starts writing a request;
	// firstWrite is then when the first write(2) of it began (zero until
	// it has). Stamping just before the system call leaves nothing but
	// the call itself between the stamp and the bytes leaving, so the
	// thread being descheduled in between is vanishingly rare.
	markRequest()
	firstWrite() time.Time
}

// maxStampAge bounds how far a kernel stamp may precede the read that
// returned it; anything older is treated as unknown rather than trusted.
const maxStampAge = 10 * time.Second

// stamperOf finds the timestamping connection under c (through TLS).
func stamperOf(c net.Conn) rxStamper {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	s, _ := c.(rxStamper)
	return s
}

// arrivalClock is the SSE reader's clock for one response: the kernel's
// receive time of the bytes just read, mapped onto the monotonic clock, or
// now when the kernel did not stamp them.
type arrivalClock struct {
	conn      rxStamper
	now       func() time.Time
	lastDelay time.Duration // user-space read time minus kernel arrival, of the latest read
	stamped   bool          // the latest read carried a kernel stamp
}

func (c *arrivalClock) Now() time.Time {
	now := c.now()
	c.lastDelay, c.stamped = 0, false
	ns := c.conn.lastRX()
	if ns == 0 {
		return now
	}
	age := time.Duration(now.UnixNano() - ns)
	switch {
	case age > maxStampAge:
		return now
	case age < 0: // wall clock stepped between the stamp and now
		age = 0
	}
	c.lastDelay, c.stamped = age, true
	return now.Add(-age) // keeps the monotonic reading
}

// stampingDialer dials TCP connections that ask the kernel for receive
// timestamps (where the platform has them).
func stampingDialer(d *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return withRXStamps(c), nil
	}
}

// withRXStamps is c reading kernel receive timestamps, or c itself where
// it cannot.
func withRXStamps(c net.Conn) net.Conn {
	if tc, ok := c.(*net.TCPConn); ok {
		if sc, ok := enableRXStamps(tc); ok {
			return sc
		}
	}
	return c
}
