package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"
)

// The side-by-side figure a user compares (SPEC §8 as amended by issue
// 40): the handler → Dispatcher → Worker path with the default tool
// options (the tool not declared idempotent: its workers keep the effect
// ledger) against the raw nats.go pattern (batched pulls), in long rounds
// (-long-n calls each, -long-rounds of them, the systems taking turns and
// the one that starts a round rotating), at 1, 2 and 4 replicas of -slots
// slots, -inflight calls in flight. Each round is printed, and the targets
// hold in every round, not only at the median: throughput ≥ 0.8× and the
// p50 of the round's round trips ≤ 1.3× the raw pattern's in the same
// round.

// sideBySide measures and prints the long rounds; it returns the verdicts
// (two per replica count: the worst round's throughput and p50).
func sideBySide(ctx context.Context, c config, raw, off system, srv *serverProcess, out io.Writer) ([]bool, error) {
	fmt.Fprintf(out, "Side by side, long rounds: offload (Toolset → Dispatcher → Worker, the lookup tool with the default options: not declared idempotent, so its workers keep the effect ledger) against raw nats.go (batched pulls); %d rounds of %d calls per system, %d in flight, %d slots per replica; each round's ratio against the raw round beside it\n",
		c.longRounds, c.longN, c.inflight, c.slots)
	fmt.Fprintln(out, "| replicas | round | raw calls/s | offload calls/s | throughput ratio | raw p50 | offload p50 | p50 ratio |")
	fmt.Fprintln(out, "| --- | --- | --- | --- | --- | --- | --- | --- |")
	var results []bool
	var worst [][2]float64
	for _, r := range c.replicas {
		tp, err := throughputs(ctx, []system{raw, off}, r, c.slots, c.longN, c.inflight, c.longRounds, srv)
		if err != nil {
			return nil, fmt.Errorf("%d replicas: %w", r, err)
		}
		tput, p50 := tp.roundRatios(1, 0)
		for k := range tput {
			fmt.Fprintf(out, "| %d | %d | %.0f | %.0f | %.2f× | %s | %s | %.2f× |\n", r, k+1, tp.rounds[0][k], tp.rounds[1][k], tput[k],
				tp.p50s[0][k].Round(10*time.Microsecond), tp.p50s[1][k].Round(10*time.Microsecond), p50[k])
		}
		worst = append(worst, [2]float64{slices.Min(tput), slices.Max(p50)})
	}
	fmt.Fprintln(out)
	for i, r := range c.replicas {
		results = append(results,
			verdict(out, fmt.Sprintf("side by side, %d replica(s): the worst round's throughput / raw", r), worst[i][0], "≥", 0.8),
			verdict(out, fmt.Sprintf("side by side, %d replica(s): the worst round's p50 / raw", r), worst[i][1], "≤", 1.3))
	}
	return results, nil
}
