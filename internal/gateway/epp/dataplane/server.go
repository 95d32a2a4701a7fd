package dataplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// ServeHTTP runs each client request through the picker and the endpoint
// it picked, relaying the answer as the picker streams it back. An
// immediate response from the picker goes to the client as it is; a
// failure of the data plane itself is a 502 (or 413 for a body over
// MaxBodyBytes), as Envoy answers when it cannot reach an upstream.
func (d *DataPlane) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, d.opts.MaxBodyBytes+1))
	if err != nil {
		http.Error(w, "data plane: reading the request body: "+err.Error(), http.StatusBadRequest)
		return
	}
	if int64(len(body)) > d.opts.MaxBodyBytes {
		http.Error(w, fmt.Sprintf("data plane: request body exceeds %d bytes", d.opts.MaxBodyBytes), http.StatusRequestEntityTooLarge)
		return
	}
	wrote := false
	_, err = d.Do(r.Context(), Request{
		Method: r.Method, Path: r.URL.RequestURI(), Header: r.Header, Body: body,
		OnResponse: func(status int, h http.Header) {
			for k, vs := range h {
				w.Header()[k] = vs
			}
			w.WriteHeader(status)
			wrote = true
		},
		Out: w,
	})
	if err != nil && !wrote && r.Context().Err() == nil {
		http.Error(w, "data plane: "+err.Error(), http.StatusBadGateway)
	}
	// Once the answer has started, a failure can only cut it short: the
	// client sees a truncated stream, as it would behind Envoy.
}

// Serve serves the data plane over HTTP on ln until ctx ends, then shuts
// down, waiting at most grace for requests in flight.
func (d *DataPlane) Serve(ctx context.Context, ln net.Listener, grace time.Duration) error {
	srv := &http.Server{Handler: d, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	var err error
	select {
	case err = <-errc:
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), grace)
		if srv.Shutdown(sctx) != nil {
			srv.Close()
		}
		cancel()
		err = <-errc
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("data plane: %w", err)
	}
	return nil
}
