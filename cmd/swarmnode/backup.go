package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/swarmkv/swarmkv/backup"
	"github.com/swarmkv/swarmkv/shard"
)

// Backups (package backup; docs/operations.md, "Backup and restore").

const backupLong = `Back the whole cluster up into one file, while it serves: the cluster
state (shard map, tokens, shard policy) and every shard, each streamed from
its leader at a committed index, checked as it arrives. The file is written
as FILE.tmp, synced and renamed to FILE; on any failure no file is left
(an older FILE stays as it was). Refused while a split or merge is in
progress; fails if the shard map changed during the backup (retry).

Each shard is exact at its own committed index; shards are copied one
after another, and no command spans two shards (only splits and merges,
which the backup excludes), so every user's data is as it was at its
shard's index.

The file is signed (HMAC-SHA256) with the first key of --backup-key-file
(SWARM_BACKUP_KEY_FILE): one key a line, at least 32 bytes, mode 0600 or
0400. A key file that does not exist is made (one random key, 0600) and
named on stderr: keep it apart from the backups; verify and restore need
it. Rotation: put a new key first (it signs), keep the old ones after it
(they verify older files).

` + adminLong

const restoreLong = `Restore a backup into an empty (or absent) data dir: the whole file is
checked first, then copied into DIR as a seed. Start one node on DIR with
swarmnode serve (no --bootstrap-expect needed): it starts a NEW cluster
alone (a new cluster id; the backup's shard map, data, tokens and bot-token
ciphertexts), ready when every shard has a leader. Start the other nodes
with --join and empty data dirs and admit each with swarmnode join; the
cluster gives them replicas. Bot tokens need the same --token-keys ring as
the source cluster (the ring is not in the backup).

The file's signature is checked with --backup-key-file (any key of it);
every token in it is checked with the rules of token create. A data dir
that holds anything, a corrupt or truncated file, a wrongly signed one,
an unsigned one (written before backups were signed; accepted only with
--trust-unsigned), one holding an invalid token, or one of a newer format
is refused with the reason, and nothing is changed.`

func newBackupCmd() *cobra.Command {
	c := &cobra.Command{Use: "backup --out FILE", Short: "back the cluster up into one file (verify FILE: check one)",
		Long: "Back the cluster up into one file.\n\n" + backupLong, Args: nargs(0, 0),
		Annotations: map[string]string{ownUse: "--out FILE --backup-key-file KEYFILE [--admin host:port] [--max-rate SIZE]"}}
	f := addAdminFlags(c.Flags())
	out := c.Flags().String("out", "", "the backup file to write (FILE.tmp while it is written)")
	keyFile := c.Flags().String("backup-key-file", "", "sign the file with this file's first key (made, with one random key, if it does not exist; also SWARM_BACKUP_KEY_FILE)")
	var rate sizeValue
	c.Flags().Var(&rate, "max-rate", "read at most this many bytes a second, e.g. 50MiB (0: no bound)")
	c.RunE = func(c *cobra.Command, _ []string) error {
		if *out == "" || *keyFile == "" {
			fmt.Fprint(c.ErrOrStderr(), c.UsageString())
			return usageError{errors.New("backup: --out FILE and --backup-key-file KEYFILE are required (the file is signed with the key: a new KEYFILE is made)")}
		}
		keys, err := signingKeys(*keyFile, c.ErrOrStderr())
		if err != nil {
			return err
		}
		return runBackup(c.Context(), f, *out, keys, int64(rate), c.OutOrStdout(), c.ErrOrStderr())
	}
	v := &cobra.Command{Use: "verify FILE", Short: "check a backup file and its signature without a cluster and print what it holds", Args: nargs(1, 1)}
	vjson := v.Flags().Bool("json", false, "print the manifest as JSON (tokens without their hashes)")
	vread := addReadFlags(v)
	v.RunE = func(c *cobra.Command, args []string) error {
		o, err := vread()
		if err != nil {
			return err
		}
		return verifyBackup(args[0], o, *vjson, c.OutOrStdout())
	}
	c.AddCommand(v)
	return c
}

func newRestoreCmd() *cobra.Command {
	c := &cobra.Command{Use: "restore --from FILE --data-dir DIR", Short: "seed an empty data dir with a backup: a new cluster",
		Long: "Seed an empty data dir with a backup.\n\n" + restoreLong, Args: nargs(0, 0)}
	from := c.Flags().String("from", "", "the backup file")
	dir := c.Flags().String("data-dir", "", "the data dir to seed: empty or absent (its parent must exist)")
	read := addReadFlags(c)
	c.RunE = func(c *cobra.Command, _ []string) error {
		if *from == "" || *dir == "" {
			fmt.Fprint(c.ErrOrStderr(), c.UsageString())
			return usageError{errors.New("restore: --from FILE and --data-dir DIR are required")}
		}
		o, err := read()
		if err != nil {
			return err
		}
		start := time.Now()
		m, err := backup.Seed(*from, *dir, o)
		if err != nil {
			return err
		}
		fmt.Fprintf(c.OutOrStdout(), "restored %s (%s) into %s in %v: %d shards, %d records, %d tokens of cluster %s (map version %d, backed up %s)\n",
			*from, signedBy(m), *dir, time.Since(start).Round(time.Millisecond), len(m.Shards), m.Records(), len(m.Tokens), m.ClusterID, m.MapVersion,
			m.Created.Format(time.RFC3339))
		fmt.Fprintf(c.OutOrStdout(), "next: start one node with swarmnode serve --data-dir %s ... (it starts a new cluster alone), then the others with --join, and admit each with swarmnode join\n", *dir)
		return nil
	}
	return c
}

// addReadFlags adds --backup-key-file and --trust-unsigned to a command
// that reads a backup file; the function it returns gives their options.
func addReadFlags(c *cobra.Command) func() (backup.ReadOptions, error) {
	keyFile := c.Flags().String("backup-key-file", "", "check the file's signature with this key file (any of its keys; also SWARM_BACKUP_KEY_FILE)")
	trust := c.Flags().Bool("trust-unsigned", false, "accept an unsigned file (written before backups were signed): only one you trust (command line only, no SWARM_ variable)")
	_ = c.Flags().SetAnnotation("trust-unsigned", noEnv, []string{"true"})
	return func() (backup.ReadOptions, error) {
		o := backup.ReadOptions{TrustUnsigned: *trust}
		if *keyFile != "" {
			k, err := backup.LoadKeys(*keyFile)
			if err != nil {
				return o, usageError{err}
			}
			o.Keys = k
		}
		return o, nil
	}
}

// signingKeys loads the key file path, making it (one random key) when it
// does not exist.
func signingKeys(path string, stderr io.Writer) (*backup.Keys, error) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		if err := backup.MakeKeyFile(path); err != nil {
			return nil, err
		}
		fmt.Fprintf(stderr, "made the backup key file %s (one random key, mode 0600): keep it apart from the backups; verify and restore need it\n", path)
	}
	k, err := backup.LoadKeys(path)
	if err != nil {
		return nil, usageError{err}
	}
	return k, nil
}

// signedBy says how a file read was signed.
func signedBy(m *backup.Manifest) string {
	if m.SignedBy == "" {
		return "UNSIGNED, trusted with --trust-unsigned"
	}
	return "signature ok, key " + m.SignedBy
}

func runBackup(ctx context.Context, f *adminFlags, path string, keys *backup.Keys, rate int64, stdout, stderr io.Writer) error {
	hc, scheme, err := f.conn.httpClient(0)
	if err != nil {
		return err
	}
	base := f.admin
	if !strings.Contains(base, "://") {
		base = scheme + "://" + base
	}
	src := &backup.HTTPSource{Client: hc, BaseURL: base, Authorize: f.authorize}
	tty := isTerminal(stderr)
	start, shardStart := time.Now(), time.Now()
	progress := func(p backup.Progress) {
		el := time.Since(start).Seconds()
		line := fmt.Sprintf("shard %d (%d of %d): %s; %s in all, %.1fs, %s/s", p.Shard, p.Done+1, p.Shards,
			formatBytes(uint64(p.Bytes)), formatBytes(uint64(p.Total)), el, formatBytes(uint64(float64(p.Total)/max(el, 1e-3))))
		switch {
		case tty && p.ShardDone:
			fmt.Fprintf(stderr, "\r\033[K%s\n", line)
		case tty:
			fmt.Fprintf(stderr, "\r\033[K%s", line)
		case p.ShardDone:
			fmt.Fprintf(stderr, "%s (shard in %.1fs)\n", line, time.Since(shardStart).Seconds())
		}
		if p.ShardDone {
			shardStart = time.Now()
		}
	}
	m, err := backup.Save(ctx, src, path, backup.Options{Keys: keys, Progress: progress, MaxRate: rate})
	if err != nil {
		if tty {
			fmt.Fprintln(stderr)
		}
		return fmt.Errorf("%w (no backup written to %s)", err, path)
	}
	if f.json {
		return printManifestJSON(stdout, m)
	}
	size := int64(0)
	if fi, err := os.Stat(path); err == nil {
		size = fi.Size()
	}
	el := time.Since(start)
	fmt.Fprintf(stdout, "backup %s: signed with key %s, cluster %s, map version %d, %d shards, %d records, %s in %v (%s/s)\n",
		path, m.SignedBy, m.ClusterID, m.MapVersion, len(m.Shards), m.Records(), formatBytes(uint64(size)), el.Round(time.Millisecond),
		formatBytes(uint64(float64(size)/max(el.Seconds(), 1e-3))))
	return nil
}

func verifyBackup(path string, o backup.ReadOptions, asJSON bool, stdout io.Writer) error {
	fh, err := os.Open(path)
	if err != nil {
		return err
	}
	defer fh.Close()
	start := time.Now()
	m, err := backup.Verify(fh, o)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if asJSON {
		return printManifestJSON(stdout, m)
	}
	size := int64(0)
	if fi, err := fh.Stat(); err == nil {
		size = fi.Size()
	}
	fmt.Fprintf(stdout, "%s: ok (%s; every checksum, record, token and the manifest checked in %v), format version %d, %s\n",
		path, signedBy(m), time.Since(start).Round(time.Millisecond), m.FormatVersion, formatBytes(uint64(size)))
	fmt.Fprintf(stdout, "cluster %s (epoch %d), backed up %s, map version %d, %d shards, replication factor %d, %d tokens\n\n",
		m.ClusterID, m.Epoch, m.Created.Format(time.RFC3339), m.MapVersion, len(m.Shards), m.ReplicationFactor, len(m.Tokens))
	smap, _ := m.Map()
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tSLOTS\tINDEX\tRECORDS\tBYTES\tSHA-256")
	for _, s := range m.Shards {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%s\t%s\n", s.Shard, slotsOf(smap, s.Shard), s.Index, s.Records, formatBytes(s.Bytes), s.SHA256[:16])
	}
	fmt.Fprintf(tw, "total\t\t\t%d\t\t\n", m.Records())
	return tw.Flush()
}

// slotsOf is shard id's slot count, with their text form ("0-15,32") when
// it is short.
func slotsOf(m *shard.Map, id shard.ID) string {
	var s shard.SlotSet
	for slot, owner := range m.Slots {
		if owner == id {
			s.Add(shard.Slot(slot))
		}
	}
	if text := s.String(); len(text) <= 20 && !s.IsEmpty() {
		return fmt.Sprintf("%d (%s)", s.Len(), text)
	}
	return fmt.Sprint(s.Len())
}

// printManifestJSON prints m without the tokens' secret hashes.
func printManifestJSON(w io.Writer, m *backup.Manifest) error {
	c := *m
	c.Tokens = append(c.Tokens[:0:0], m.Tokens...)
	for i := range c.Tokens {
		c.Tokens[i].Hash = ""
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(&c)
}

// isTerminal reports whether w is a terminal (progress lines are redrawn
// there).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
