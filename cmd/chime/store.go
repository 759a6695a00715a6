package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/chimehq/chime/host"
	"github.com/chimehq/chime/storage"
)

// newStoreCommand is `chime store`: offline check, backup and restore of
// the host's data directory (docs/failures.md). The host must be stopped: Badger
// locks the directory.
func newStoreCommand() *cobra.Command {
	var dataDir string
	cmd := &cobra.Command{
		Use:   "store",
		Short: "Check, back up or restore the host's data directory (host stopped)",
	}
	cmd.PersistentFlags().StringVar(&dataDir, "data-dir", "", "data directory (default $CHIME_DATA_DIR or ./data)")
	dir := func() string {
		if dataDir != "" {
			return dataDir
		}
		if v := strings.TrimSpace(os.Getenv("CHIME_DATA_DIR")); v != "" {
			return v
		}
		return host.DefaultDataDir
	}
	// open refuses a directory without a store: check and backup must not
	// create an empty one where the user mistyped a path.
	open := func(mustExist bool) (*storage.Store, error) {
		d := dir()
		if mustExist {
			if _, err := os.Stat(d + "/MANIFEST"); err != nil {
				return nil, fmt.Errorf("no store in %s (no MANIFEST): %w", d, err)
			}
		}
		// Read-only work: no headroom needed.
		return storage.Open(d, storage.Options{Logger: newLogger(), MinFree: 1})
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "check",
		Short: "Read the whole store, verify every checksum and its generation",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := open(true)
			if err != nil {
				return err
			}
			info, err := s.Info()
			cerr := s.Close()
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "ok: %s holds %d keys (%d sessions, %d clock tasks), generation %d (marker %d)\n",
				dir(), info.Keys, info.Sessions, info.Tasks, info.Generation, info.Marker)
			return cerr
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "backup FILE",
		Short: "Write a full backup of the store to FILE (Badger's backup format)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := open(true)
			if err != nil {
				return err
			}
			defer s.Close()
			f, err := os.OpenFile(args[0], os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil {
				return fmt.Errorf("backup file: %w", err)
			}
			_, err = s.Backup(f)
			if err == nil {
				err = f.Sync()
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				_ = os.Remove(args[0])
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "backed up %s to %s\n", dir(), args[0])
			return s.Close()
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "restore FILE",
		Short: "Load a backup into an empty data directory",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, err := os.Open(args[0])
			if err != nil {
				return fmt.Errorf("backup file: %w", err)
			}
			defer in.Close()
			if ents, err := os.ReadDir(dir()); err == nil && len(ents) > 0 {
				return fmt.Errorf("restore into %s: the directory is not empty; restore into a new one and point CHIME_DATA_DIR at it", dir())
			} else if err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
			s, err := storage.Open(dir(), storage.Options{Logger: newLogger()})
			if err != nil {
				return err
			}
			if err := s.Restore(in); err != nil {
				_ = s.Close()
				return err
			}
			info, err := s.Info()
			if cerr := s.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "restored %s into %s: %d keys (%d sessions, %d clock tasks)\n", args[0], dir(), info.Keys, info.Sessions, info.Tasks)
			return nil
		},
	})
	return cmd
}
