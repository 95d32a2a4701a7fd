//go:build linux

package bench

import (
	"io"
	"net"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// cmsg builds one control message.
func cmsg(level, typ int32, data []byte) []byte {
	b := make([]byte, syscall.CmsgSpace(len(data)))
	h := (*syscall.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level, h.Type = level, typ
	h.SetLen(syscall.CmsgLen(len(data)))
	copy(b[syscall.CmsgLen(0):], data)
	return b
}

func timespecBytes(ns int64) []byte {
	ts := syscall.NsecToTimespec(ns)
	return unsafe.Slice((*byte)(unsafe.Pointer(&ts)), unsafe.Sizeof(ts))
}

func TestParseRXStamp(t *testing.T) {
	const ns = 1_764_460_800_123_456_789
	other := cmsg(syscall.SOL_SOCKET, syscall.SCM_RIGHTS, []byte{1, 2, 3, 4})
	stamp := cmsg(syscall.SOL_SOCKET, syscall.SCM_TIMESTAMPNS, timespecBytes(ns))
	for _, tc := range []struct {
		name string
		oob  []byte
		want int64
	}{
		{"alone", stamp, ns},
		{"after another message", append(append([]byte{}, other...), stamp...), ns},
		{"none", other, 0},
		{"empty", nil, 0},
		{"truncated header", stamp[:8], 0},
		{"truncated data", stamp[:syscall.CmsgLen(4)], 0},
		{"wrong level", cmsg(syscall.IPPROTO_TCP, syscall.SCM_TIMESTAMPNS, timespecBytes(ns)), 0},
	} {
		if got := parseRXStamp(tc.oob); got != tc.want {
			t.Errorf("%s: got %d, want %d", tc.name, got, tc.want)
		}
	}
}

func FuzzParseRXStamp(f *testing.F) {
	f.Add(cmsg(syscall.SOL_SOCKET, syscall.SCM_TIMESTAMPNS, timespecBytes(42)))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 1, 0, 0, 0, 35, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		// Aligned copy, as the connection's buffer is.
		buf := make([]uint64, (len(b)+7)/8)
		oob := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(buf))), len(buf)*8)[:len(b)]
		copy(oob, b)
		_ = parseRXStamp(oob)
	})
}

// TestKernelStampPrecedesRead: over real loopback TCP, each read's kernel
// stamp lies between the write that sent the bytes and the read's return.
func TestKernelStampPrecedesRead(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	c, err := stampingDialer(&net.Dialer{})(t.Context(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st, ok := c.(rxStamper)
	if !ok {
		t.Fatalf("dialer returned %T without kernel timestamps", c)
	}
	srv := <-accepted
	if srv == nil {
		t.Fatal("accept failed")
	}
	defer srv.Close()
	buf := make([]byte, 64)
	// The kernel turns receive stamping on for the whole host lazily (a
	// deferred static-key switch) when the first socket asks for it, so the
	// first segments may come unstamped: wait, bounded, for stamps to flow.
	for i := 0; ; i++ {
		if _, err := srv.Write([]byte("warm\n")); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Read(buf); err != nil {
			t.Fatal(err)
		}
		if st.lastRX() != 0 {
			break
		}
		if i == 100 {
			t.Fatal("no kernel receive timestamp after 100 reads over 1 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i := range 20 {
		before := time.Now().UnixNano()
		if _, err := srv.Write([]byte("data: x\n\n")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond) // the read returns well after arrival
		n, err := c.Read(buf)
		after := time.Now().UnixNano()
		if err != nil || n == 0 {
			t.Fatalf("read %d: %d bytes, %v", i, n, err)
		}
		rx := st.lastRX()
		if rx < before || rx > after {
			t.Fatalf("read %d: kernel stamp %d outside [%d, %d]", i, rx, before, after)
		}
		if after-rx < int64(500*time.Microsecond) {
			t.Errorf("read %d: stamp only %v before the read returned, want ≈ the 1 ms sleep", i, time.Duration(after-rx))
		}
	}
	srv.Close()
	if n, err := c.Read(buf); n != 0 || err == nil {
		t.Errorf("after close: %d bytes, %v; want EOF", n, err)
	}
}

// TestFirstWriteOfARequest: after markRequest, the first write is stamped
// just before its system call, and later writes of the same request leave
// the stamp alone.
func TestFirstWriteOfARequest(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			_, _ = io.Copy(io.Discard, c)
			c.Close()
		}
	}()
	c, err := stampingDialer(&net.Dialer{})(t.Context(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st := c.(rxStamper)
	if !st.firstWrite().IsZero() {
		t.Fatal("a write stamp before any request")
	}
	for range 3 {
		st.markRequest()
		if !st.firstWrite().IsZero() {
			t.Fatal("markRequest kept the previous request's stamp")
		}
		before := time.Now()
		if _, err := c.Write([]byte("POST / HTTP/1.1\r\n")); err != nil {
			t.Fatal(err)
		}
		first := st.firstWrite()
		if first.Before(before) || first.After(time.Now()) {
			t.Fatalf("first write stamped %v, outside the call that began at %v", first, before)
		}
		time.Sleep(time.Millisecond)
		if _, err := c.Write([]byte("\r\n")); err != nil {
			t.Fatal(err)
		}
		if got := st.firstWrite(); !got.Equal(first) {
			t.Fatalf("a later write moved the stamp from %v to %v", first, got)
		}
	}
}
