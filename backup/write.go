package backup

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"

	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/shard"
)

// SectionWriter writes one section (one shard's records, in key order).
// A node serves a shard's backup as one section (package admin); Writer
// copies sections into the file. It refuses a record out of order or out
// of bounds (fsm.CheckSnapshotRecord).
type SectionWriter struct {
	w       io.Writer
	sum     hash.Hash
	info    ShardInfo
	prev    []byte
	err     error
	scratch [1 + 2*binary.MaxVarintLen64]byte
}

// NewSectionWriter starts the section of shard id at index on w (which
// the caller buffers).
func NewSectionWriter(w io.Writer, id shard.ID, index uint64) *SectionWriter {
	s := &SectionWriter{w: w, sum: sha256.New(), info: ShardInfo{Shard: id, Index: index}}
	b := append(s.scratch[:0], tagSection)
	b = binary.BigEndian.AppendUint32(b, uint32(id))
	s.write(binary.BigEndian.AppendUint64(b, index))
	return s
}

func (s *SectionWriter) write(p []byte) {
	if s.err != nil {
		return
	}
	s.sum.Write(p)
	_, s.err = s.w.Write(p)
}

// Record writes one record.
func (s *SectionWriter) Record(key, value []byte) error {
	if s.err != nil {
		return s.err
	}
	if err := fsm.CheckSnapshotRecord(key, value); err != nil {
		s.err = fmt.Errorf("backup: shard %d: %w", s.info.Shard, err)
		return s.err
	}
	if s.info.Records > 0 && bytes.Compare(key, s.prev) <= 0 {
		s.err = fmt.Errorf("backup: shard %d: keys not in ascending order", s.info.Shard)
		return s.err
	}
	s.prev = append(s.prev[:0], key...)
	s.write(binary.AppendUvarint(append(s.scratch[:0], tagRecord), uint64(len(key))))
	s.write(key)
	s.write(binary.AppendUvarint(s.scratch[:0], uint64(len(value))))
	s.write(value)
	s.info.Records++
	s.info.Bytes += uint64(len(key) + len(value))
	return s.err
}

// Finish writes the section's end and returns what it holds.
func (s *SectionWriter) Finish() (ShardInfo, error) {
	b := binary.BigEndian.AppendUint64(append(s.scratch[:0], tagEnd), s.info.Records)
	s.write(b)
	sum := s.sum.Sum(nil)
	if s.err == nil {
		_, s.err = s.w.Write(sum)
	}
	s.info.SHA256 = hex.EncodeToString(sum)
	return s.info, s.err
}

// Writer writes a backup file: the header, sections (from the nodes,
// CopySection, or record by record, Section), then the manifest (Finish).
// It buffers; Finish flushes. The caller syncs and closes the file.
type Writer struct {
	keys     *Keys
	out      *bufio.Writer
	sum      hash.Hash // of every byte written
	w        io.Writer // out and sum
	sections []ShardInfo
	open     bool // a Section is being written
	err      error
}

// NewWriter writes the header to w; Finish signs the file with keys'
// first key.
func NewWriter(w io.Writer, keys *Keys) (*Writer, error) {
	if keys == nil {
		return nil, fmt.Errorf("%w: no key to sign the backup with", ErrKeyFile)
	}
	out := bufio.NewWriterSize(w, 256<<10)
	fw := &Writer{keys: keys, out: out, sum: sha256.New()}
	fw.w = io.MultiWriter(out, fw.sum)
	hdr := binary.BigEndian.AppendUint32([]byte(magic), FormatVersion)
	if _, err := fw.w.Write(hdr); err != nil {
		return nil, err
	}
	return fw, nil
}

// CopySection reads one section from r (a node's answer), checks all of
// it (framing, records, order, checksum, the end of r) and appends it to
// the file as it goes. Sections must come in ascending shard order.
func (w *Writer) CopySection(r io.Reader) (ShardInfo, error) {
	if w.err != nil {
		return ShardInfo{}, w.err
	}
	d := newDecoder(r)
	d.sinks = append(d.sinks, w.w)
	info, err := readSection(d, nil)
	if err == nil {
		err = d.end()
	}
	if err == nil {
		err = w.add(info)
	}
	if err != nil {
		w.err = err
		return ShardInfo{}, err
	}
	return info, nil
}

// Section starts a section written record by record; its Finish adds it
// to the file.
func (w *Writer) Section(id shard.ID, index uint64) *FileSection {
	w.open = true
	return &FileSection{w: w, sw: NewSectionWriter(w.w, id, index)}
}

// FileSection is a section Writer.Section started.
type FileSection struct {
	w  *Writer
	sw *SectionWriter
}

// Record writes one record.
func (s *FileSection) Record(key, value []byte) error { return s.sw.Record(key, value) }

// Finish ends the section.
func (s *FileSection) Finish() (ShardInfo, error) {
	s.w.open = false
	info, err := s.sw.Finish()
	if err == nil {
		err = s.w.add(info)
	}
	if err != nil {
		s.w.err = err
	}
	return info, err
}

func (w *Writer) add(info ShardInfo) error {
	if n := len(w.sections); n > 0 && info.Shard <= w.sections[n-1].Shard {
		return fmt.Errorf("backup: section of shard %d after shard %d", info.Shard, w.sections[n-1].Shard)
	}
	w.sections = append(w.sections, info)
	return nil
}

// Finish fills m's shards' figures in from the sections written (m must
// list exactly their shards), writes the manifest, the file's checksum
// and the signature, and flushes.
func (w *Writer) Finish(m *Manifest) error {
	if w.err != nil {
		return w.err
	}
	if w.open {
		return fmt.Errorf("backup: a section is still open")
	}
	if len(m.Shards) != len(w.sections) {
		return fmt.Errorf("backup: the manifest lists %d shards, %d sections were written", len(m.Shards), len(w.sections))
	}
	for i, s := range w.sections {
		if m.Shards[i].Shard != s.Shard {
			return fmt.Errorf("backup: the manifest's shard %d is section %d's shard %d", m.Shards[i].Shard, i, s.Shard)
		}
		s.Incarnation, s.StartsEmpty = m.Shards[i].Incarnation, m.Shards[i].StartsEmpty
		m.Shards[i] = s
	}
	if err := m.check(FormatVersion, w.sections); err != nil {
		return err
	}
	js, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if len(js) > maxManifest {
		return fmt.Errorf("backup: manifest of %d bytes, over %d", len(js), maxManifest)
	}
	b := binary.BigEndian.AppendUint32([]byte{tagManifest}, uint32(len(js)))
	if _, err := w.w.Write(append(b, js...)); err != nil {
		return err
	}
	sum := w.sum.Sum(nil)
	if _, err := w.out.Write(sum); err != nil {
		return err
	}
	if _, err := w.out.Write(w.keys.sign(FormatVersion, sum)); err != nil {
		return err
	}
	m.SignedBy = w.keys.SigningKeyID()
	return w.out.Flush()
}
