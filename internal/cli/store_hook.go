package cli

import (
	"context"
	"fmt"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/store"
)

// storeRun records a finished run in the results database. The run's files
// are already on disk, so a failure here loses nothing.
func storeRun(ctx context.Context, env *Env, dsn, dir string, man record.Manifest, sum record.Summary, recs []record.Record) (string, error) {
	if dsn == "" {
		dsn = store.DefaultDSN(env.getenv)
	}
	st, err := store.Open(ctx, dsn)
	if err != nil {
		return "", fmt.Errorf("opening %s: %w", dsn, err)
	}
	defer st.Close()
	labels := map[string]string{"dir": dir}
	for k, v := range man.Labels {
		labels[k] = v
	}
	return st.Save(ctx, store.RunInput{Manifest: man, Summary: sum, Records: recs, Source: man.Source, Labels: labels})
}
