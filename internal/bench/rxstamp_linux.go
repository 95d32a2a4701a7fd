//go:build linux

package bench

import (
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// rxConn reads with recvmsg(2) so that each read brings the kernel's
// receive timestamp (SCM_TIMESTAMPNS) of the last segment it consumed.
//
// A read is on every token's path, so it allocates nothing: the message
// header, the control buffer and the callback handed to RawConn.Read live
// in the connection (syscall.Recvmsg would allocate a socket address, and
// a fresh closure its captured variables, on every call).
type rxConn struct {
	net.Conn
	raw  syscall.RawConn
	last atomic.Int64

	rmu    sync.Mutex // one Read at a time uses the fields below
	oob    [8]uint64  // 64 bytes, aligned for a cmsghdr
	iov    syscall.Iovec
	msg    syscall.Msghdr
	n      int
	errno  syscall.Errno
	readFn func(fd uintptr) bool

	base   time.Time   // monotonic origin of tx
	marked atomic.Bool // a request started; its first write is not yet stamped
	tx     atomic.Int64
}

// enableRXStamps turns on SO_TIMESTAMPNS; false if the socket refuses.
func enableRXStamps(c *net.TCPConn) (net.Conn, bool) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, false
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_TIMESTAMPNS, 1)
	}); err != nil || serr != nil {
		return nil, false
	}
	rc := &rxConn{Conn: c, raw: raw, base: time.Now()}
	rc.readFn = rc.recvmsg
	return rc, true
}

// recvmsg is the RawConn.Read callback: false asks to wait for input.
func (c *rxConn) recvmsg(fd uintptr) bool {
	for {
		n, _, e := syscall.Syscall(syscall.SYS_RECVMSG, fd, uintptr(unsafe.Pointer(&c.msg)), 0)
		if e == syscall.EINTR {
			continue
		}
		c.n, c.errno = int(n), e
		return e != syscall.EAGAIN
	}
}

func (c *rxConn) lastRX() int64 { return c.last.Load() }

func (c *rxConn) markRequest() {
	c.tx.Store(0)
	c.marked.Store(true)
}

func (c *rxConn) firstWrite() time.Time {
	if v := c.tx.Load(); v != 0 {
		return c.base.Add(time.Duration(v - 1))
	}
	return time.Time{}
}

func (c *rxConn) Write(p []byte) (int, error) {
	if c.marked.Load() && c.marked.CompareAndSwap(true, false) {
		c.tx.Store(int64(time.Since(c.base)) + 1)
	}
	return c.Conn.Write(p)
}

func (c *rxConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.iov.Base = &p[0]
	c.iov.SetLen(len(p))
	c.msg = syscall.Msghdr{Iov: &c.iov, Iovlen: 1, Control: (*byte)(unsafe.Pointer(&c.oob[0]))}
	c.msg.SetControllen(len(c.oob) * 8)
	c.n, c.errno = 0, 0
	err := c.raw.Read(c.readFn)
	n, oobn := c.n, int(c.msg.Controllen)
	c.iov.Base = nil // do not keep the caller's buffer alive
	if err == nil && c.errno != 0 {
		err = &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError("recvmsg", c.errno)}
	}
	if err != nil {
		c.last.Store(0)
		return 0, err
	}
	if n == 0 {
		return 0, io.EOF
	}
	oob := unsafe.Slice((*byte)(unsafe.Pointer(&c.oob[0])), len(c.oob)*8)
	c.last.Store(parseRXStamp(oob[:min(oobn, len(oob))]))
	return n, nil
}

// parseRXStamp returns the SCM_TIMESTAMPNS in a control message buffer as
// Unix nanoseconds, or 0.
func parseRXStamp(oob []byte) int64 {
	hdr := syscall.CmsgLen(0)
	for len(oob) >= hdr {
		h := (*syscall.Cmsghdr)(unsafe.Pointer(&oob[0]))
		l := int(h.Len)
		if l < hdr || l > len(oob) {
			return 0
		}
		if h.Level == syscall.SOL_SOCKET && h.Type == syscall.SCM_TIMESTAMPNS && l >= syscall.CmsgLen(int(unsafe.Sizeof(syscall.Timespec{}))) {
			ts := (*syscall.Timespec)(unsafe.Pointer(&oob[hdr]))
			return ts.Nano()
		}
		oob = oob[min(len(oob), syscall.CmsgSpace(l-hdr)):]
	}
	return 0
}
