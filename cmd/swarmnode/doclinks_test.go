package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// TestDocLinks: every relative link of README.md and docs/*.md names a
// file or directory of the repository, and every #anchor a heading of
// the page it points to (GitHub's anchors); every docs/NAME.md the text
// mentions exists.
func TestDocLinks(t *testing.T) {
	root := filepath.Join("..", "..")
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append([]string{filepath.Join(root, "README.md")}, pages...)
	for _, p := range pages {
		for _, problem := range checkDocLinks(p) {
			t.Errorf("%s", problem)
		}
	}
}

// TestDocLinksFindsBrokenOnes: the checker reports a missing file, a
// missing anchor on another page and on its own, and a mentioned page
// that does not exist; it accepts what resolves.
func TestDocLinksFindsBrokenOnes(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("docs/b.md", "# B page\n\n## Round 18 (2026-11-28): a move's `copy`\n\n## Same\n\n## Same\n")
	write("README.md", strings.Join([]string{
		"# Top", "",
		"[ok](docs/b.md) [ok](docs/b.md#b-page) [ok](docs/b.md#round-18-2026-11-28-a-moves-copy)",
		"[ok](docs/b.md#same-1) [ok](#top) [ok](docs/) [ok](https://example.com/x.md#nope) docs/b.md",
		"[missing file](docs/c.md) [missing anchor](docs/b.md#round-19) [own](#bottom)",
		"see docs/gone.md", "```", "[in a fence](nowhere.md)", "```", "`[in code](nowhere.md)`",
	}, "\n"))
	got := checkDocLinks(filepath.Join(dir, "README.md"))
	want := []string{"docs/c.md", "docs/b.md#round-19", "#bottom", "docs/gone.md"}
	if len(got) != len(want) {
		t.Fatalf("problems %q, want one for each of %q", got, want)
	}
	for i, w := range want {
		if !strings.Contains(got[i], w) {
			t.Errorf("problem %d is %q, want one about %s", i, got[i], w)
		}
	}
}

var (
	linkRE    = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	refLinkRE = regexp.MustCompile(`^\s*\[[^\]]+\]:\s+(\S+)`)
	mentionRE = regexp.MustCompile(`\bdocs/[A-Za-z0-9_-]+\.md\b`)
	codeRE    = regexp.MustCompile("`[^`]*`")
)

// checkDocLinks returns one line per broken link or mention of page.
func checkDocLinks(page string) []string {
	text, err := os.ReadFile(page)
	if err != nil {
		return []string{err.Error()}
	}
	root := filepath.Dir(page)
	for root != "/" && root != "." {
		if _, err := os.Stat(filepath.Join(root, "README.md")); err == nil {
			break
		}
		root = filepath.Dir(root)
	}
	var problems []string
	for n, line := range proseLines(string(text)) {
		if line == "" {
			continue
		}
		where := fmt.Sprintf("%s:%d", page, n+1)
		for _, m := range mentionRE.FindAllString(linkRE.ReplaceAllString(line, "]"), -1) { // links: below
			if _, err := os.Stat(filepath.Join(root, m)); err != nil {
				problems = append(problems, fmt.Sprintf("%s: mentions %s, which does not exist", where, m))
			}
		}
		var targets []string
		for _, m := range linkRE.FindAllStringSubmatch(codeRE.ReplaceAllString(line, ""), -1) {
			targets = append(targets, m[1])
		}
		if m := refLinkRE.FindStringSubmatch(line); m != nil {
			targets = append(targets, m[1])
		}
		for _, target := range targets {
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			dest := page
			if file != "" {
				dest = filepath.Join(filepath.Dir(page), file)
				if _, err := os.Stat(dest); err != nil {
					problems = append(problems, fmt.Sprintf("%s: link %s: no such file", where, target))
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			if anchors, err := headingAnchors(dest); err != nil || !anchors[anchor] {
				problems = append(problems, fmt.Sprintf("%s: link %s: no heading with that anchor in %s", where, target, dest))
			}
		}
	}
	return problems
}

// proseLines returns the lines of a markdown text with those inside
// fenced code blocks (and the fences) blanked.
func proseLines(text string) []string {
	lines := strings.Split(text, "\n")
	fenced := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			lines[i] = ""
		} else if fenced {
			lines[i] = ""
		}
	}
	return lines
}

// headingAnchors returns the anchors GitHub gives the headings of a
// markdown page: lower case, punctuation dropped, spaces as hyphens, a
// repeated anchor suffixed -1, -2, ...
func headingAnchors(page string) (map[string]bool, error) {
	text, err := os.ReadFile(page)
	if err != nil {
		return nil, err
	}
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, l := range proseLines(string(text)) {
		level := len(l) - len(strings.TrimLeft(l, "#"))
		if level == 0 || level > 6 || !strings.HasPrefix(l[level:], " ") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(l[level:])) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		if k := seen[a]; k > 0 {
			anchors[fmt.Sprintf("%s-%d", a, k)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors, nil
}
