package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/pending"
	"github.com/offload-dev/offload/pkg/protocol"
)

// The paged views' figure (SPEC §21): the time of the first page of the
// calls waiting for a person (pending.Desk.Page, what GET /v1/pending and
// the inbox call) with pagesLarge calls pending against pagesSmall, each
// on streams of its own prefix of the same server, measured in
// alternating turns; and, for scale, the list these pages replaced
// (Desk.Calls: every pending record read) with as many.
const (
	pagesSmall   = 10
	pagesLarge   = 10_000
	pagesTurns   = 10
	pagesPerTurn = 20
	pagesScanN   = 3
	// pagesLimit is the pages' size: both first pages hold as many calls
	// (a page's cost is its calls', each read against its record).
	pagesLimit = pagesSmall
)

// pagesWorld is a desk over pending records of one prefix.
type pagesWorld struct {
	n     int
	store *convstore.Store
	desk  *pending.Desk
}

// newPagesWorld provisions prefix's streams and saves n conversations,
// each waiting for one approval.
func newPagesWorld(ctx context.Context, js jetstream.JetStream, prefix string, n int) (*pagesWorld, error) {
	prov := natsjs.ProvisionOptions{Prefix: prefix}
	if err := natsjs.Provision(ctx, js, prov); err != nil {
		return nil, err
	}
	store, err := convstore.New(ctx, convstore.Config{JetStream: js, Provision: prov})
	if err != nil {
		return nil, err
	}
	recs, err := convstore.OpenPending(ctx, convstore.OpenConfig{JetStream: js, Provision: prov})
	if err != nil {
		return nil, err
	}
	desk, err := pending.New(pending.Config{Records: recs})
	if err != nil {
		return nil, err
	}
	for i := range n {
		id := protocol.NewID()
		st := &conversation.State{ID: id, Agent: &conversation.AgentRef{Name: "ops"},
			History: message.History{message.NewRequest(message.UserText("deploy it"))},
			Pending: &deferred.PendingRecord{ConversationID: id, RunID: protocol.NewID(), Tasks: []deferred.PendingTask{{
				TaskID: protocol.NewID(), Kind: deferred.KindApproval, Tool: "deploy", ToolCallID: "call_1",
				Args: json.RawMessage(fmt.Sprintf(`{"target":"host-%d"}`, i))}}}}
		if _, err := store.Save(ctx, st, 0); err != nil {
			return nil, fmt.Errorf("save %d of %d: %w", i, n, err)
		}
	}
	return &pagesWorld{n: n, store: store, desk: desk}, nil
}

// pagesFilters are the filters timed: every call (GET /v1/pending), the
// calls for a person (the inbox), the approvals (?kind=approval: one
// kind, filtered by the server on the subject).
var pagesFilters = []pending.Filter{{}, {Kinds: pending.ForPeople}, {Kinds: []deferred.Kind{deferred.KindApproval}}}

// firstPage reads the first page of the calls f selects.
func (w *pagesWorld) firstPage(ctx context.Context, f pending.Filter) (time.Duration, error) {
	start := time.Now()
	page, err := w.desk.Page(ctx, f, "", pagesLimit)
	d := time.Since(start)
	if err == nil && len(page.Calls) != pagesLimit {
		err = fmt.Errorf("the first page of %d calls holds %d", w.n, len(page.Calls))
	}
	return d, err
}

// pagesFigures are the section's measurements.
type pagesFigures struct {
	small, large [3]latency    // the first page of each of pagesFilters
	scan         time.Duration // the median of Desk.Calls with pagesLarge
	fill         time.Duration // saving the pagesLarge conversations
}

// measurePages fills the two prefixes, then times their first pages in
// alternating turns, then the full list with pagesLarge.
func measurePages(ctx context.Context, ep endpoint) (pagesFigures, error) {
	var f pagesFigures
	nc, err := ep.connect("bench pages")
	if err != nil {
		return f, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return f, err
	}
	small, err := newPagesWorld(ctx, js, "pgsmall", pagesSmall)
	if err != nil {
		return f, fmt.Errorf("%d pending: %w", pagesSmall, err)
	}
	start := time.Now()
	large, err := newPagesWorld(ctx, js, "pglarge", pagesLarge)
	if err != nil {
		return f, fmt.Errorf("%d pending: %w", pagesLarge, err)
	}
	f.fill = time.Since(start)
	nf := len(pagesFilters)
	all := make([][]time.Duration, 2*nf)
	for turn := range pagesTurns {
		for k := range 2 * nf {
			i := (turn + k) % (2 * nf)
			w, fl := []*pagesWorld{small, large}[i%2], pagesFilters[i/2]
			if _, err := w.firstPage(ctx, fl); err != nil { // warm
				return f, err
			}
			for range pagesPerTurn {
				d, err := w.firstPage(ctx, fl)
				if err != nil {
					return f, err
				}
				all[i] = append(all[i], d)
			}
		}
	}
	for j := range nf {
		f.small[j], f.large[j] = percentiles(all[2*j]), percentiles(all[2*j+1])
	}
	var scans []time.Duration
	for range pagesScanN {
		start := time.Now()
		calls, err := large.desk.Calls(ctx, pending.Filter{Kinds: pending.ForPeople})
		if err != nil {
			return f, err
		}
		if len(calls) != pagesLarge {
			return f, fmt.Errorf("the full list of %d calls holds %d", pagesLarge, len(calls))
		}
		scans = append(scans, time.Since(start))
	}
	f.scan = percentiles(scans).p50
	return f, nil
}

// reportPages prints the section and its target: the first page with
// pagesLarge calls pending within 1.5× of the one with pagesSmall.
func reportPages(out io.Writer, f pagesFigures) []bool {
	fmt.Fprintf(out, "Paged views (SPEC §21): the first page (limit %d: both pages hold as many calls) of the calls waiting for a person, pending.Desk.Page as GET /v1/pending and the inbox call it, read from the index of pending calls, with %d calls pending against %d (each on a prefix of its own, same server), %d turns of %d pages, alternating\n",
		pagesLimit, pagesLarge, pagesSmall, pagesTurns, pagesPerTurn)
	fmt.Fprintln(out, "| calls pending | page | first page p50 | p99 |")
	fmt.Fprintln(out, "| --- | --- | --- | --- |")
	names := []string{"every call (GET /v1/pending)", "for a person (the inbox)", "?kind=approval (one kind: filtered on the subject)"}
	for j, name := range names {
		fmt.Fprintf(out, "| %d | %s | %s | %s |\n", pagesSmall, name, f.small[j].p50.Round(time.Microsecond), f.small[j].p99.Round(time.Microsecond))
		fmt.Fprintf(out, "| %d | %s | %s | %s |\n", pagesLarge, name, f.large[j].p50.Round(time.Microsecond), f.large[j].p99.Round(time.Microsecond))
	}
	fmt.Fprintf(out, "For scale: the whole list (Desk.Calls, every pending record read, what the views read before the index) with %d pending: %s (median of %d); saving the %d paused conversations took %s\n",
		pagesLarge, f.scan.Round(time.Millisecond), pagesScanN, pagesLarge, f.fill.Round(time.Millisecond))
	fmt.Fprintln(out)
	results := []bool{
		verdict(out, fmt.Sprintf("first page of every call p50, %d pending / %d", pagesLarge, pagesSmall), float64(f.large[0].p50)/float64(f.small[0].p50), "≤", 1.5),
		verdict(out, fmt.Sprintf("first page for a person p50, %d pending / %d", pagesLarge, pagesSmall), float64(f.large[1].p50)/float64(f.small[1].p50), "≤", 1.5),
	}
	fmt.Fprintf(out, "- first page of one kind p50, %d pending / %d: %.2f× (no target: nats-server matches a wildcard filter against every subject)\n",
		pagesLarge, pagesSmall, float64(f.large[2].p50)/float64(f.small[2].p50))
	fmt.Fprintln(out)
	return results
}
