package cli

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/store"
)

// storeRun records a finished run in the results database. The run's files
// are already on disk, so a failure here loses nothing.
func storeRun(ctx context.Context, env *Env, dsn, dir string, man record.Manifest, sum record.Summary, recs []record.Record) (string, error) {
	if dsn == "" {
		dsn = defaultDSN(env)
	}
	st, err := store.Open(ctx, dsn)
	if err != nil {
		return "", err // it names the store (a URL's password hidden)
	}
	defer st.Close()
	labels := map[string]string{"dir": dir}
	for k, v := range man.Labels {
		labels[k] = v
	}
	id, err := st.Save(ctx, store.RunInput{Manifest: man, Summary: sum, Records: recs, Source: man.Source, Labels: labels})
	if err != nil {
		return "", fmt.Errorf("%s: %w", st.Describe(), err)
	}
	return id, nil
}

// defaultDSN is the results database when --db is not given: $TTFT_DB, else
// ttft.db in the data directory (beside runs/), which never resolves to a
// relative path even when HOME is unset.
func defaultDSN(env *Env) string {
	if v := env.getenv(store.EnvDB); v != "" {
		return v
	}
	return filepath.Join(dataDir(env), "ttft.db")
}
