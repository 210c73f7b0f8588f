package client

// Paged listings. The server answers every listing one page at a time: at
// most Page.Limit items (0: the server's page size, --max-scan-page,
// which also caps it), and no more than its byte bound (--max-page-bytes;
// a page always holds at least one item), with a cursor to continue. The
// ...Page methods return one page and the next cursor (nil after the last
// page). A page of a filtered listing (pools an actor may see, stale
// runners, a user's sessions of an agent) may hold fewer items than the
// limit, even none, while more follow: stop on a nil cursor, not on a short
// page.
//
// The seed-shaped methods (ListAgentsByUser, ListSessionsByAgent,
// ListPools, ListBots, ListRunners, ...) still return the whole listing:
// they request page after page. Each page is a separate read, so a listing
// is not one snapshot: an item written or deleted meanwhile may be missed
// or seen, but no item present throughout is missed or seen twice.
//
//	var cur []byte
//	for {
//		agents, next, err := reg.ListAgentsByUserPage(ctx, uid, client.Page{Cursor: cur, Limit: 100})
//		if err != nil { ... }
//		use(agents)
//		if next == nil { break }
//		cur = next
//	}

import (
	"bytes"
	"context"
	"fmt"
)

// Page asks for one page of a listing.
type Page struct {
	// Cursor is the previous page's next cursor; nil for the first page.
	Cursor []byte
	// Limit is the most items of the page; 0 (or more than the server
	// allows) asks for the server's page size.
	Limit int
}

func (p Page) limit() uint32 {
	if p.Limit <= 0 {
		return 0
	}
	return uint32(min(p.Limit, 1<<31))
}

// nextCursor turns a response's cursor into the one a ...Page method
// returns: nil after the last page.
func nextCursor(c []byte) []byte {
	if len(c) == 0 {
		return nil
	}
	return c
}

// collectPages calls page from the first page until the cursor it returns
// is nil and concatenates the items. A server that answers the cursor it
// was given again would loop forever: that is an error.
func collectPages[T any](ctx context.Context, what string, page func(ctx context.Context, p Page) ([]T, []byte, error)) ([]T, error) {
	var all []T
	var cursor []byte
	for {
		items, next, err := page(ctx, Page{Cursor: cursor})
		if err != nil {
			return nil, err
		}
		all = append(all, items...)
		if next == nil {
			return all, nil
		}
		if cursor != nil && bytes.Equal(next, cursor) {
			return nil, fmt.Errorf("swarmkv: %s: listing cursor does not advance", what)
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		cursor = next
	}
}
