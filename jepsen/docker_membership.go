package jepsen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/cluster"
)

// AddNode recreates the compose service that is not a member and was
// removed longest ago (never-used spares first) with an empty volume,
// admits it and waits until it holds replicas.
func (d *Docker) AddNode(ctx context.Context) (string, error) {
	d.mu.Lock()
	var node string
	for _, s := range d.cfg.Services {
		if slices.Contains(d.members, s) {
			continue
		}
		if node == "" || d.removedAt[s].Before(d.removedAt[node]) {
			node = s
		}
	}
	d.mu.Unlock()
	if node == "" {
		return "", fmt.Errorf("jepsen: add node: every compose service (%s) is a member", strings.Join(d.cfg.Services, ", "))
	}
	return node, d.admit(ctx, node)
}

// Decommission removes node through another member's admin API, waits
// until the cluster state marks it removed, then kills its container.
func (d *Docker) Decommission(ctx context.Context, node string) error {
	if !slices.Contains(d.Nodes(), node) {
		return fmt.Errorf("jepsen: decommission %s: not a member", node)
	}
	if err := removeMember(ctx, d, node); err != nil {
		return err
	}
	d.mu.Lock()
	d.members = slices.DeleteFunc(d.members, func(id string) bool { return id == node })
	d.removedAt[node] = time.Now()
	d.mu.Unlock()
	return d.Kill(ctx, node)
}

// Rejoin recreates a decommissioned node's container with an empty
// volume, admits it and waits until it holds replicas.
func (d *Docker) Rejoin(ctx context.Context, node string) error {
	if slices.Contains(d.Nodes(), node) {
		return fmt.Errorf("jepsen: rejoin %s: still a member; decommission it first", node)
	}
	return d.admit(ctx, node)
}

// admit recreates node's container from scratch (its join list the
// current members), admits it through a running member, adds it to Nodes
// and waits until it holds replicas and is ready. A node that is not
// admitted is killed.
func (d *Docker) admit(ctx context.Context, node string) error {
	if err := d.recreate(ctx, node); err != nil {
		return err
	}
	if err := joinMember(ctx, d, node); err != nil {
		return errors.Join(err, d.Kill(ctx, node))
	}
	d.mu.Lock()
	if !slices.Contains(d.members, node) {
		d.members = append(d.members, node)
		slices.Sort(d.members)
	}
	d.mu.Unlock()
	return waitPlaced(ctx, d, node, func(ctx context.Context) error { return d.Ready(ctx, node) })
}

// recreate removes node's container and volume and starts the compose
// service again, with SWARMKV_JOIN naming the members' gossip addresses
// (the compose file's default lists n1..n3, which may be gone).
func (d *Docker) recreate(ctx context.Context, node string) error {
	if _, err := d.docker(ctx, "rm", "-f", d.container(node)); err != nil && !strings.Contains(err.Error(), "No such container") {
		return err
	}
	volume := d.cfg.Project + "_" + node + "-data"
	if _, err := d.docker(ctx, "volume", "rm", "-f", volume); err != nil {
		return err
	}
	var join []string
	for _, m := range d.Nodes() {
		join = append(join, m+":7103")
	}
	err := retryPortInUse(ctx, func() error {
		args := append(slices.Clone(d.cfg.Compose[1:]), "up", "-d", "--no-deps", node)
		cmd := exec.CommandContext(ctx, d.cfg.Compose[0], args...)
		cmd.Env = append(os.Environ(),
			fmt.Sprintf("SWARMKV_PORT_DIGIT=%d", d.cfg.PortDigit),
			"SWARMKV_JOIN="+strings.Join(join, ","))
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s %s: %w: %s", d.cfg.Compose[0], strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("jepsen: start %s: %w", node, err)
	}
	d.setDown(node, false)
	return d.learnIP(ctx, node)
}

func (d *Docker) adminVia(except string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for _, id := range d.members {
		if id != except && !d.down[id] && !d.cut[id] {
			out = append(out, id)
		}
	}
	return out
}

func (d *Docker) adminJoin(ctx context.Context, via, node string) (string, error) {
	var res struct{ Status string }
	err := adminHTTP(ctx, http.MethodPost, "http://"+d.httpAddr(via)+"/v1/members/"+node+"/join", nil, &res)
	return res.Status, err
}

func (d *Docker) adminRemove(ctx context.Context, via, node string) (string, error) {
	var res struct{ Status string }
	err := adminHTTP(ctx, http.MethodPost, "http://"+d.httpAddr(via)+"/v1/members/"+node+"/remove", nil, &res)
	return res.Status, err
}

func (d *Docker) adminMembers(ctx context.Context, via string) ([]cluster.MemberInfo, error) {
	var ms []cluster.MemberInfo
	err := adminHTTP(ctx, http.MethodGet, "http://"+d.httpAddr(via)+"/v1/members", nil, &ms)
	return ms, err
}

// adminHTTPError is an error answer of the HTTP API: its status code, and
// the gRPC status adminHTTP maps it to (status.Code reads it).
type adminHTTPError struct {
	HTTP int
	err  error
}

func (e *adminHTTPError) Error() string              { return e.err.Error() }
func (e *adminHTTPError) GRPCStatus() *status.Status { return status.Convert(e.err) }

// adminHTTP calls a node's HTTP API at url (with body, if not nil) and
// decodes the JSON answer into out (nil: the answer is not read); an error answer becomes a gRPC status with the code the API
// mapped to its HTTP status (400 InvalidArgument, 404 NotFound, anything
// else Unavailable, so that it is retried).
func adminHTTP(ctx context.Context, method, url string, body io.Reader, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		if json.Unmarshal(answer, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(answer))
		}
		code := codes.Unavailable
		switch resp.StatusCode {
		case http.StatusBadRequest:
			code = codes.InvalidArgument
		case http.StatusNotFound:
			code = codes.NotFound
		}
		return &adminHTTPError{HTTP: resp.StatusCode, err: status.Errorf(code, "%s %s: %s: %s", method, req.URL.Path, resp.Status, e.Error)}
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(answer, out)
}
