// Package console checks the cluster console (/ui/, package console) in
// a real browser: headless Chromium, driven through the DevTools protocol
// (github.com/chromedp/chromedp), against a 3-node cluster of swarmnode
// processes on loopback with --auth. It is its own package so that its
// cost (a browser, a binary build) stays out of the other tests.
//
// Without a Chromium on the machine the test skips, saying so, except
// under CI=true (or with SWARMKV_REQUIRE_BROWSER set, as `make test-ui`
// does), where it fails: CI must run it (`make test` installs Debian's
// chromium first; `make test-ui` installs it and runs only this).
// SWARMKV_TEST_PORT_BASE, when set, makes the nodes' ports count up from
// it (a port range of one's own on a shared machine).
// UI_SCREENSHOT_DIR, when set, receives screenshots of the page before and
// after the kill (never commit them).
package console

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdppage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/internal/freeport"
)

// chromium returns the path of a Chromium (or Chrome) binary: $CHROMIUM,
// else the first of the usual names on PATH. None: the test skips, or
// fails under CI=true.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	const msg = "no Chromium installed (looked for $CHROMIUM, chromium, chromium-browser, google-chrome, headless-shell on PATH): " +
		"`make test-ui` installs Debian's chromium and runs this test"
	if os.Getenv("CI") == "true" || os.Getenv("SWARMKV_REQUIRE_BROWSER") != "" {
		t.Fatal("CI=true or SWARMKV_REQUIRE_BROWSER set: the console's browser test must run, but " + msg)
	}
	t.Skip(msg)
	return ""
}

// ports hands out loopback addresses: from SWARMKV_TEST_PORT_BASE upwards
// when it is set (a port range of one's own on a shared machine), else
// from package freeport. Either way a port is checked free first.
type ports struct {
	t    *testing.T
	next int
}

func (p *ports) addr() string {
	p.t.Helper()
	if p.next == 0 {
		a, err := freeport.Addr()
		if err != nil {
			p.t.Fatal(err)
		}
		return a
	}
	for ; ; p.next++ {
		a := net.JoinHostPort("127.0.0.1", strconv.Itoa(p.next))
		ln, err := net.Listen("tcp", a)
		if err != nil {
			continue
		}
		pc, err := net.ListenPacket("udp", a)
		ln.Close()
		if err != nil {
			continue
		}
		pc.Close()
		p.next++
		return a
	}
}

type node struct {
	id, dir                  string
	grpc, raft, http, gossip string
	cmd                      *exec.Cmd
	done                     chan struct{}
	log                      *os.File
}

// kill sends SIGKILL and waits for the process to exit.
func (n *node) kill() {
	if n.cmd == nil {
		return
	}
	n.cmd.Process.Signal(syscall.SIGKILL)
	<-n.done
	n.log.Close()
	n.cmd = nil
}

func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "swarmnode")
	cmd := exec.Command("go", "build", "-o", bin, "../../cmd/swarmnode")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// startCluster starts 3 nodes with --auth (no TLS: loopback, one cluster
// secret) and 2 shards, and waits until each is ready.
func startCluster(t *testing.T, bin string) ([]*node, string) {
	t.Helper()
	base := t.TempDir()
	secret := make([]byte, 32)
	rand.Read(secret)
	secretFile := filepath.Join(base, "cluster-secret")
	if err := os.WriteFile(secretFile, []byte(hex.EncodeToString(secret)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pp := &ports{t: t}
	if b := os.Getenv("SWARMKV_TEST_PORT_BASE"); b != "" {
		n, err := strconv.Atoi(b)
		if err != nil {
			t.Fatalf("SWARMKV_TEST_PORT_BASE %q: %v", b, err)
		}
		pp.next = n
	}
	var nodes []*node
	var gossips []string
	for i := range 3 {
		n := &node{id: fmt.Sprintf("n%d", i+1), dir: filepath.Join(base, fmt.Sprintf("n%d", i+1)),
			grpc: pp.addr(), raft: pp.addr(), http: pp.addr(), gossip: pp.addr()}
		nodes = append(nodes, n)
		gossips = append(gossips, n.gossip)
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			n.kill()
		}
		if t.Failed() {
			for _, n := range nodes {
				b, _ := os.ReadFile(n.dir + ".log")
				t.Logf("--- %s log (last 3000 bytes):\n%s", n.id, b[max(0, len(b)-3000):])
			}
		}
	})
	for _, n := range nodes {
		logf, err := os.Create(n.dir + ".log")
		if err != nil {
			t.Fatal(err)
		}
		n.log = logf
		n.cmd = exec.Command(bin, "serve", "--id", n.id, "--data-dir", n.dir,
			"--grpc-addr", n.grpc, "--raft-addr", n.raft, "--http-addr", n.http, "--gossip-addr", n.gossip,
			"--join", strings.Join(gossips, ","), "--bootstrap-expect", "3", "--shards", "2",
			"--auth", "--cluster-secret-file", secretFile,
			"--gossip-profile", "local", "--heartbeat-timeout", "500ms", "--election-timeout", "500ms",
			"--zone", zoneOf(n.id), "--host", "h-"+n.id)
		n.cmd.Stdout, n.cmd.Stderr = logf, logf
		if err := n.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		n.done = make(chan struct{})
		go func(cmd *exec.Cmd, done chan struct{}) { cmd.Wait(); close(done) }(n.cmd, n.done)
	}
	waitFor(t, 90*time.Second, "every node ready", func() error {
		for _, n := range nodes {
			code, body, err := get("http://"+n.http+"/readyz", "")
			if err != nil {
				return err
			}
			if code != http.StatusOK {
				return fmt.Errorf("%s: %d %s", n.id, code, body)
			}
		}
		return nil
	})
	return nodes, secretFile
}

// zoneOf is the zone label startCluster gives node nI: z1, z2, z3.
func zoneOf(id string) string { return "z" + strings.TrimPrefix(id, "n") }

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = cond(); err == nil {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("%s: not within %v: %v", what, timeout, err)
}

// get answers an HTTP GET's status and body, with a bearer token if
// given.
func get(url, token string) (int, string, error) {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// cspRecorder records the page's Content-Security-Policy violations
// (directive and what was blocked) in window.__cspViolations.
const cspRecorder = `window.__cspViolations = [];
document.addEventListener('securitypolicyviolation', (e) => window.__cspViolations.push(e.violatedDirective + ' ' + e.blockedURI));`

// page is what the console shows, read from its DOM.
type page struct {
	Login   bool   `json:"login"`
	State   string `json:"state"`
	Members []struct {
		ID, Class, Gossip, Version, Zone, Host string
	} `json:"members"`
	Leaders []struct{ Shard, Leader string }     `json:"leaders"`
	Cells   []struct{ Shard, Node, Text string } `json:"cells"`
	Events  int                                  `json:"events"`
	Writes  string                               `json:"writes"`
}

const readPage = `(() => ({
  login: !document.getElementById('login').hidden,
  state: document.getElementById('state').textContent,
  members: [...document.querySelectorAll('#members tbody tr')].map((tr) => ({
    ID: tr.dataset.node, Class: tr.className,
    Gossip: tr.querySelector('td.gossip').textContent, Version: tr.querySelector('td.version').textContent,
    Zone: tr.querySelector('td.zone').textContent, Host: tr.querySelector('td.host').textContent})),
  leaders: [...document.querySelectorAll('#grid td.leader-name')].map((td) => ({Shard: td.dataset.shard, Leader: td.textContent})),
  cells: [...document.querySelectorAll('#grid td.cell')].map((td) => ({Shard: td.dataset.shard, Node: td.dataset.node, Text: td.textContent})),
  events: document.querySelectorAll('#events li').length,
  writes: document.getElementById('last-writes').textContent,
}))()`

func (p page) member(id string) (class, gossip string, ok bool) {
	for _, m := range p.Members {
		if m.ID == id {
			return m.Class, m.Gossip, true
		}
	}
	return "", "", false
}

// TestConsoleShowsDeadNode: the console of a 3-node cluster with --auth
// asks for a token, then shows every member alive with its zone and host
// labels and a leader for every group; once a node leading a group is
// SIGKILLed, its row turns dead, its replicas show '?', and every group's
// leader is another node.
func TestConsoleShowsDeadNode(t *testing.T) {
	browser := chromium(t)
	if testing.Short() {
		t.Skip("starts a cluster and a browser")
	}
	bin := buildBinary(t)
	nodes, secretFile := startCluster(t, bin)
	n1 := nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// The first admin token, made with the cluster secret.
	var token string
	waitFor(t, 30*time.Second, "token create", func() error {
		out, err := exec.CommandContext(ctx, bin, "token", "create", "--admin", n1.http, "--name", "console", "--role", "admin,kv:read,kv:write",
			"--cluster-secret-file", secretFile).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		token = lines[len(lines)-1]
		return nil
	})
	// Over plain HTTP: the page is open, its data needs the token.
	if code, body, err := get("http://"+n1.http+"/ui/", ""); err != nil || code != 200 || !strings.Contains(body, "swarmkv console") {
		t.Fatalf("GET /ui/ without a token: %d %v", code, err)
	}
	// The page runs under its Content-Security-Policy (own files only, no
	// inline script or style, never framed): what follows checks that it
	// still works so.
	if resp, err := http.Get("http://" + n1.http + "/ui/"); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") ||
			resp.Header.Get("X-Frame-Options") != "DENY" {
			t.Fatalf("GET /ui/: Content-Security-Policy %q, X-Frame-Options %q", csp, resp.Header.Get("X-Frame-Options"))
		}
	}
	if code, _, err := get("http://"+n1.http+"/v1/console", ""); err != nil || code != http.StatusUnauthorized {
		t.Fatalf("GET /v1/console without a token: %d %v, want 401", code, err)
	}
	waitFor(t, 10*time.Second, "the token known to n1", func() error {
		start := time.Now()
		code, body, err := get("http://"+n1.http+"/v1/console", token)
		if err == nil && code != 200 {
			err = fmt.Errorf("%d %s", code, body)
		}
		if err == nil { // the node's first round (measured, not asserted)
			t.Logf("a /v1/console round took %v, answered %d bytes", time.Since(start).Round(time.Millisecond), len(body))
		}
		return err
	})

	// A writer, so that the charts have something to draw.
	cl, err := client.New(ctx, client.Config{Endpoints: []string{n1.grpc, nodes[1].grpc, nodes[2].grpc}, Token: token, AttemptTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	wctx, stopWriter := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; wctx.Err() == nil; i++ {
			rk := []byte(fmt.Sprintf("user-%d", i%50))
			err := cl.Put(wctx, rk, []byte("k"), []byte(strconv.Itoa(i)))
			if err == nil {
				_, err = cl.Get(wctx, rk, []byte("k"))
			}
			if err != nil && wctx.Err() == nil { // a node down: the client retries; do not spin
				select {
				case <-wctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
			}
		}
	}()
	defer wg.Wait()
	defer stopWriter()

	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1500, 1100))...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer cancelBrowser()
	read := func() (page, error) { return chromedp.Run(bctx, chromedp.Evaluate[page](readPage)) }
	shot := func(name string) {
		dir := os.Getenv("UI_SCREENSHOT_DIR")
		if dir == "" {
			return
		}
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100)) // 100: PNG
		if err != nil {
			t.Errorf("screenshot: %v", err)
			return
		}
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(dir, 0o755); err == nil {
			err = os.WriteFile(path, png, 0o644)
		}
		t.Logf("screenshot %s (%d bytes)", path, len(png))
	}

	// Every violation of the page's policy is recorded (a DevTools script,
	// itself outside the policy, run before the page's own).
	if err := chromedp.Do(bctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, cdppage.AddScriptToEvaluateOnNewDocument, cdppage.AddScriptToEvaluateOnNewDocumentParams{Source: cspRecorder})
		return err
	})); err != nil {
		t.Fatal(err)
	}

	// The page asks for the token, then shows the cluster.
	if err := chromedp.Do(bctx, chromedp.Navigate("http://"+n1.http+"/ui/"), chromedp.WaitVisible(chromedp.ID("token"))); err != nil {
		t.Fatalf("the page did not ask for a token: %v", err)
	}
	if err := chromedp.Do(bctx, chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Click(chromedp.CSS(`#login button[type="submit"]`))); err != nil {
		t.Fatal(err)
	}
	ids := []string{"n1", "n2", "n3"}
	var p page
	waitFor(t, 60*time.Second, "members alive and every group led", func() error {
		if p, err = read(); err != nil {
			return err
		}
		if p.Login {
			return fmt.Errorf("still asking for a token (state %q)", p.State)
		}
		for _, id := range ids {
			class, gossip, ok := p.member(id)
			if !ok || gossip != "alive" || class == "dead" {
				return fmt.Errorf("member %s: shown %v, gossip %q, class %q", id, ok, gossip, class)
			}
		}
		for _, m := range p.Members { // the labels, once the meta leader has recorded them
			if m.Zone != zoneOf(m.ID) || m.Host != "h-"+m.ID {
				return fmt.Errorf("member %s: zone %q, host %q shown, want %q, %q", m.ID, m.Zone, m.Host, zoneOf(m.ID), "h-"+m.ID)
			}
		}
		if len(p.Leaders) != 3 { // meta and the 2 shards
			return fmt.Errorf("groups shown: %+v", p.Leaders)
		}
		for _, l := range p.Leaders {
			if !slices.Contains(ids, l.Leader) {
				return fmt.Errorf("group %s: leader %q", l.Shard, l.Leader)
			}
		}
		if p.Writes == "" {
			return fmt.Errorf("no chart point yet")
		}
		return nil
	})
	for _, m := range p.Members {
		if !strings.HasPrefix(m.Version, "v") {
			t.Errorf("member %s: protocol version shown %q", m.ID, m.Version)
		}
	}
	shot("console-before.png")

	// The victim leads a group and is not n1 (whose page we watch). The
	// reconciler spreads leaderships; if n1 still holds them all, move one.
	var victim string
	for _, l := range p.Leaders {
		if l.Leader != "n1" {
			victim = l.Leader
		}
	}
	if victim == "" {
		victim = "n2"
		if out, err := exec.CommandContext(ctx, bin, "transfer-leader", "0", victim, "--admin", n1.http,
			"--cluster-secret-file", secretFile).CombinedOutput(); err != nil {
			t.Fatalf("transfer-leader: %v %s", err, out)
		}
	}
	t.Logf("killing %s (leaders before: %+v)", victim, p.Leaders)
	nodes[slices.Index(ids, victim)].kill()

	waitFor(t, 60*time.Second, victim+" dead on the page, its replicas '?', leaders moved", func() error {
		if p, err = read(); err != nil {
			return err
		}
		if class, gossip, _ := p.member(victim); class != "dead" || gossip != "dead" {
			return fmt.Errorf("%s row: class %q, gossip %q", victim, class, gossip)
		}
		cells := 0
		for _, c := range p.Cells {
			if c.Node == victim {
				cells++
				if c.Text != "?" {
					return fmt.Errorf("group %s, %s: %q", c.Shard, victim, c.Text)
				}
			}
		}
		if cells != 3 {
			return fmt.Errorf("%d cells for %s, want 3", cells, victim)
		}
		for _, l := range p.Leaders {
			if l.Leader == victim || !slices.Contains(ids, l.Leader) {
				return fmt.Errorf("group %s: leader %q", l.Shard, l.Leader)
			}
		}
		for _, id := range ids {
			if class, gossip, _ := p.member(id); id != victim && (class == "dead" || gossip != "alive") {
				return fmt.Errorf("survivor %s: class %q, gossip %q", id, class, gossip)
			}
		}
		return nil
	})
	if p.Events == 0 {
		t.Error("no recent events shown")
	}
	shot("console-dead-node.png")

	// The page did all that under its policy without one violation; and
	// the policy is in force: an inline script added now is blocked.
	violations := func() ([]string, error) {
		return chromedp.Run(bctx, chromedp.Evaluate[[]string](`window.__cspViolations || []`))
	}
	if v, err := violations(); err != nil || len(v) != 0 {
		t.Fatalf("policy violations of the page: %q %v", v, err)
	}
	if _, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`(() => { const s = document.createElement('script'); s.textContent = 'window.__inline = 1'; document.body.append(s); return true })()`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the inline script refused", func() error {
		v, err := violations()
		if err == nil && (len(v) != 1 || !strings.HasPrefix(v[0], "script-src")) {
			err = fmt.Errorf("violations %q", v)
		}
		return err
	})
	out, _ := json.Marshal(p.Leaders)
	t.Logf("after the kill: leaders %s, %d events shown, state %q", out, p.Events, p.State)
}
