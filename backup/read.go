package backup

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"slices"

	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/shard"
)

// Reader reads a backup file and checks all of it as it goes (the checks
// are listed in the package doc): Next returns each section, whose Next
// returns its records; after the last section Next checks the manifest
// and the end of the file and returns io.EOF, and Manifest returns it.
// Memory stays bounded by one record. Errors wrap ErrCorrupt (or
// ErrTruncated, ErrBadToken, ErrNewerFormat, ErrUnsigned, ErrSignature)
// or are the underlying reader's. The signature is checked last, so a
// caller that acts on the records before Next returns io.EOF (a node
// writing its seed's replicas) must have checked the file whole first.
type Reader struct {
	d        *decoder
	o        ReadOptions
	version  int
	sum      hash.Hash // of every byte read
	sections []ShardInfo
	cur      *Section
	m        *Manifest
	err      error
}

// ReadOptions say how a reader treats a file's signature.
type ReadOptions struct {
	// Keys check a signed file's signature (nil: none; a signed file is
	// then refused, ErrSignature, unless SkipSignature).
	Keys *Keys
	// TrustUnsigned accepts a file without a signature (format version 1,
	// written before backups were signed): the operator's explicit trust
	// in where the file came from (swarmnode: --trust-unsigned).
	TrustUnsigned bool
	// SkipSignature does not check a signed file's signature, only its
	// checksums and contents: for a file whose signature was checked
	// before it was copied where only its owner writes (a node's seed,
	// which Seed checked), or a reader of records only (backupdiff).
	SkipSignature bool
}

// NewReader reads and checks the header: a file of format version 1 is
// refused (ErrUnsigned) unless o.TrustUnsigned, a signed one without a
// key (ErrSignature) unless o.SkipSignature.
func NewReader(r io.Reader, o ReadOptions) (*Reader, error) {
	br := &Reader{d: newDecoder(r), o: o, sum: sha256.New()}
	br.d.sinks = append(br.d.sinks, br.sum)
	var hdr [len(magic) + 4]byte
	if err := br.d.full(hdr[:], "header"); err != nil {
		return nil, err
	}
	if string(hdr[:len(magic)]) != magic {
		return nil, fmt.Errorf("%w: not a swarmkv backup (it starts %q, not %q)", ErrCorrupt, hdr[:len(magic)], magic)
	}
	v := binary.BigEndian.Uint32(hdr[len(magic):])
	switch {
	case v > FormatVersion:
		return nil, fmt.Errorf("%w: the file is of format version %d, this swarmnode reads up to %d: use a newer swarmnode", ErrNewerFormat, v, FormatVersion)
	case v == 0:
		return nil, fmt.Errorf("%w: format version 0", ErrCorrupt)
	case v < firstSigned && !o.TrustUnsigned:
		return nil, fmt.Errorf("%w: format version %d, written before backups were signed, so nothing shows it was not changed since: "+
			"if you trust where it came from, pass --trust-unsigned (then take a new, signed backup)", ErrUnsigned, v)
	case v >= firstSigned && o.Keys == nil && !o.SkipSignature:
		return nil, fmt.Errorf("%w: the file is signed and no backup key was given to check it: pass the key file it was signed with (--backup-key-file)", ErrSignature)
	}
	br.version = int(v)
	return br, nil
}

// Next returns the next section (after checking the rest of the current
// one, if its records were not all read), or io.EOF once the manifest and
// the whole-file checksum are checked and nothing follows them.
func (r *Reader) Next() (*Section, error) {
	if r.err != nil {
		return nil, r.err
	}
	s, err := r.next()
	if err != nil {
		r.err = err
	}
	return s, err
}

func (r *Reader) next() (*Section, error) {
	if c := r.cur; c != nil {
		for {
			if _, _, err := c.Next(); err == io.EOF {
				break
			} else if err != nil {
				return nil, err
			}
		}
		r.cur = nil
	}
	tag, err := r.d.peek("section or manifest")
	if err != nil {
		return nil, err
	}
	switch tag {
	case tagSection:
		s, err := openSection(r.d)
		if err != nil {
			return nil, err
		}
		if n := len(r.sections); n > 0 && s.info.Shard <= r.sections[n-1].Shard {
			return nil, r.d.corrupt("section of shard %d after shard %d", s.info.Shard, r.sections[n-1].Shard)
		}
		r.cur = &Section{Shard: s.info.Shard, Index: s.info.Index, s: s, r: r}
		return r.cur, nil
	case tagManifest:
		return nil, r.readManifest()
	}
	return nil, r.d.corrupt("tag 0x%02x where a section or the manifest starts", tag)
}

func (r *Reader) readManifest() error {
	var hdr [5]byte
	if err := r.d.full(hdr[:], "manifest"); err != nil {
		return err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > maxManifest {
		return r.d.corrupt("manifest of %d bytes, over %d", n, maxManifest)
	}
	js, err := r.d.appendN(nil, uint64(n), "manifest")
	if err != nil {
		return err
	}
	want := r.sum.Sum(nil)
	var got [sha256.Size]byte
	if err := r.d.full(got[:], "file checksum"); err != nil {
		return err
	}
	if !bytes.Equal(got[:], want) {
		return fmt.Errorf("%w: file checksum mismatch: stored %x, computed %x", ErrCorrupt, got, want)
	}
	signedBy := ""
	if r.version >= firstSigned {
		var b [sigLen]byte
		if err := r.d.full(b[:], "signature"); err != nil {
			return err
		}
		sig, err := parseSignature(b[:])
		if err != nil {
			return err
		}
		if !r.o.SkipSignature {
			if err := r.o.Keys.verify(sig, uint32(r.version), want); err != nil {
				return err
			}
			signedBy = hex.EncodeToString(sig.keyID[:])
		}
	}
	if err := r.d.end(); err != nil {
		return err
	}
	var m Manifest
	if err := json.Unmarshal(js, &m); err != nil {
		return fmt.Errorf("%w: manifest: %v", ErrCorrupt, err)
	}
	if err := m.check(r.version, r.sections); err != nil {
		return err
	}
	m.SignedBy = signedBy
	r.m = &m
	return io.EOF
}

// Manifest returns the manifest once Next returned io.EOF (nil before).
func (r *Reader) Manifest() *Manifest { return r.m }

// Section is one shard's section of a file being read.
type Section struct {
	Shard shard.ID
	Index uint64
	s     *sectionReader
	r     *Reader
}

// Next returns the next record, valid until the following call, or
// io.EOF once the section's end, record count and checksum are checked.
func (s *Section) Next() (key, value []byte, err error) {
	if s.r.err != nil {
		return nil, nil, s.r.err
	}
	key, value, err = s.s.next()
	switch {
	case err == io.EOF:
		if s.r.cur == s {
			s.r.sections = append(s.r.sections, s.s.info)
			s.r.cur = nil
		}
	case err != nil:
		s.r.err = err
	}
	return key, value, err
}

// Verify reads all of r and returns its manifest if the file checks out
// (its signature as o says).
func Verify(r io.Reader, o ReadOptions) (*Manifest, error) {
	br, err := NewReader(r, o)
	if err != nil {
		return nil, err
	}
	for {
		if _, err := br.Next(); err == io.EOF {
			return br.Manifest(), nil
		} else if err != nil {
			return nil, err
		}
	}
}

// sectionReader reads one section from a decoder.
type sectionReader struct {
	d    *decoder
	sum  hash.Hash
	info ShardInfo
	rec  []byte // the current record: key then value
	prev []byte // the previous key
	done bool
}

// openSection reads a section's start.
func openSection(d *decoder) (*sectionReader, error) {
	s := &sectionReader{d: d, sum: sha256.New()}
	d.section = s.sum
	var hdr [1 + 4 + 8]byte
	if err := d.full(hdr[:], "section header"); err != nil {
		return nil, err
	}
	if hdr[0] != tagSection {
		return nil, d.corrupt("tag 0x%02x where a section starts", hdr[0])
	}
	s.info.Shard = shard.ID(binary.BigEndian.Uint32(hdr[1:]))
	s.info.Index = binary.BigEndian.Uint64(hdr[5:])
	if s.info.Shard >= shard.MaxShards {
		return nil, d.corrupt("shard id %d", s.info.Shard)
	}
	return s, nil
}

func (s *sectionReader) next() (key, value []byte, err error) {
	if s.done {
		return nil, nil, io.EOF
	}
	d := s.d
	tag, err := d.byte("record tag")
	if err != nil {
		return nil, nil, err
	}
	switch tag {
	case tagRecord:
	case tagEnd:
		return nil, nil, s.end()
	default:
		return nil, nil, d.corrupt("shard %d: tag 0x%02x after %d records", s.info.Shard, tag, s.info.Records)
	}
	klen, err := d.uvarint("key length")
	if err != nil {
		return nil, nil, err
	}
	if klen == 0 || klen > fsm.MaxRecordKey {
		return nil, nil, d.corrupt("shard %d: record %d: key length %d", s.info.Shard, s.info.Records, klen)
	}
	if s.rec, err = d.appendN(s.rec[:0], klen, "key"); err != nil {
		return nil, nil, err
	}
	vlen, err := d.uvarint("value length")
	if err != nil {
		return nil, nil, err
	}
	if vlen > fsm.MaxRecordValue {
		return nil, nil, d.corrupt("shard %d: record %d: value length %d", s.info.Shard, s.info.Records, vlen)
	}
	if s.rec, err = d.appendN(s.rec, vlen, "value"); err != nil {
		return nil, nil, err
	}
	key, value = s.rec[:klen:klen], s.rec[klen:]
	if err := fsm.CheckSnapshotRecord(key, value); err != nil {
		return nil, nil, d.corrupt("shard %d: record %d: %v", s.info.Shard, s.info.Records, err)
	}
	if s.info.Records > 0 && bytes.Compare(key, s.prev) <= 0 {
		return nil, nil, d.corrupt("shard %d: record %d: keys not in ascending order", s.info.Shard, s.info.Records)
	}
	s.prev = append(s.prev[:0], key...)
	s.info.Records++
	s.info.Bytes += klen + vlen
	return key, value, nil
}

// end checks the record count and the checksum (the 'E' tag is read).
func (s *sectionReader) end() error {
	d := s.d
	var cnt [8]byte
	if err := d.full(cnt[:], "record count"); err != nil {
		return err
	}
	if n := binary.BigEndian.Uint64(cnt[:]); n != s.info.Records {
		return d.corrupt("shard %d: record count %d, read %d", s.info.Shard, n, s.info.Records)
	}
	want := s.sum.Sum(nil)
	d.section = nil
	var got [sha256.Size]byte
	if err := d.full(got[:], "section checksum"); err != nil {
		return err
	}
	if !bytes.Equal(got[:], want) {
		return d.corrupt("shard %d: section checksum mismatch: stored %x, computed %x", s.info.Shard, got, want)
	}
	s.info.SHA256 = hex.EncodeToString(want)
	s.done = true
	s.rec, s.prev = nil, nil
	return io.EOF
}

// readSection reads a whole section, handing each record to fn (nil: none).
func readSection(d *decoder, fn func(k, v []byte) error) (ShardInfo, error) {
	s, err := openSection(d)
	if err != nil {
		return ShardInfo{}, err
	}
	for {
		k, v, err := s.next()
		if err == io.EOF {
			return s.info, nil
		}
		if err != nil {
			return ShardInfo{}, err
		}
		if fn != nil {
			if err := fn(k, v); err != nil {
				return ShardInfo{}, err
			}
		}
	}
}

// decoder reads the file's primitives, handing every byte it consumes to
// its sinks (checksums, a file being written) and to the current
// section's checksum. A short read is ErrTruncated.
type decoder struct {
	r       *bufio.Reader
	sinks   []io.Writer
	section hash.Hash // the current section's checksum, nil outside one
	off     int64     // bytes consumed
	err     error     // a sink's first error
	one     [1]byte
}

func newDecoder(r io.Reader) *decoder { return &decoder{r: bufio.NewReaderSize(r, 64<<10)} }

func (d *decoder) consumed(p []byte) error {
	d.off += int64(len(p))
	if d.section != nil {
		d.section.Write(p)
	}
	for _, s := range d.sinks {
		if _, err := s.Write(p); err != nil && d.err == nil {
			d.err = err
		}
	}
	return d.err
}

// corrupt returns an ErrCorrupt error naming the offset reached.
func (d *decoder) corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: at byte %d: %s", ErrCorrupt, d.off, fmt.Sprintf(format, args...))
}

// short turns a read error into ErrTruncated (an end of input) or keeps it
// (the underlying reader's own error).
func (d *decoder) short(what string, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: the file ends at byte %d, in the %s", ErrTruncated, d.off, what)
	}
	return fmt.Errorf("backup: read %s: %w", what, err)
}

func (d *decoder) full(p []byte, what string) error {
	n, err := io.ReadFull(d.r, p)
	if cerr := d.consumed(p[:n]); cerr != nil {
		return cerr
	}
	if err != nil {
		return d.short(what, err)
	}
	return nil
}

func (d *decoder) byte(what string) (byte, error) {
	if err := d.full(d.one[:], what); err != nil {
		return 0, err
	}
	return d.one[0], nil
}

// peek returns the next byte without consuming it.
func (d *decoder) peek(what string) (byte, error) {
	b, err := d.r.Peek(1)
	if err != nil {
		return 0, d.short(what, err)
	}
	return b[0], nil
}

// uvarint reads a uvarint in its shortest form.
func (d *decoder) uvarint(what string) (uint64, error) {
	var buf [binary.MaxVarintLen64]byte
	for i := range buf {
		c, err := d.byte(what)
		if err != nil {
			return 0, err
		}
		buf[i] = c
		if c < 0x80 {
			v, n := binary.Uvarint(buf[:i+1])
			if n <= 0 || n != len(binary.AppendUvarint(nil, v)) {
				return 0, d.corrupt("%s: bad uvarint % x", what, buf[:i+1])
			}
			return v, nil
		}
	}
	return 0, d.corrupt("%s: uvarint over %d bytes", what, binary.MaxVarintLen64)
}

// appendN appends the next n bytes to b, growing it only as the data
// arrives (a corrupt length allocates no more than the file holds).
func (d *decoder) appendN(b []byte, n uint64, what string) ([]byte, error) {
	for n > 0 {
		chunk := int(min(n, 64<<10))
		cur := len(b)
		b = slices.Grow(b, chunk)[:cur+chunk]
		if err := d.full(b[cur:], what); err != nil {
			return b[:cur], err
		}
		n -= uint64(chunk)
	}
	return b, nil
}

// end checks that the input ends here.
func (d *decoder) end() error {
	_, err := d.r.ReadByte()
	switch {
	case err == io.EOF:
		return nil
	case err == nil:
		return d.corrupt("bytes after the end")
	}
	return fmt.Errorf("backup: read: %w", err)
}
