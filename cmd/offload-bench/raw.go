package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/protocol"
)

// rawSystem is the baseline: the same publish → consume → publish → consume
// path written directly with nats.go, with no offload bookkeeping, over
// streams and a consumer built from the same definitions (prefix "rawb").
// Tasks go to the work-queue stream with Nats-Msg-Id (synchronous PubAck),
// workers pull one message at a time, publish the result to the results
// stream and ack; the caller reads results with an ordered consumer.
type rawSystem struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	mu      sync.Mutex
	waiting map[string]chan struct{}
	cc      jetstream.ConsumeContext
	workers []*rawWorker
}

const (
	rawTasks   = "RAWB_TASKS"
	rawResults = "RAWB_RESULTS"
)

func newRawSystem(ctx context.Context, url string) (*rawSystem, error) {
	nc, err := nats.Connect(url)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	// The same stream and consumer definitions as offload's (jetstream/),
	// under another prefix: the baseline differs only in the code path.
	popts := natsjs.ProvisionOptions{Prefix: "rawb"}
	streams, err := natsjs.Streams(popts)
	if err != nil {
		return nil, err
	}
	for _, cfg := range streams {
		_ = js.DeleteStream(ctx, cfg.Name)
		if _, err := js.CreateStream(ctx, cfg); err != nil {
			return nil, err
		}
	}
	ccfg, err := natsjs.TaskConsumerConfig("noop", popts)
	if err != nil {
		return nil, err
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, rawTasks, ccfg); err != nil {
		return nil, err
	}
	s := &rawSystem{nc: nc, js: js, waiting: map[string]chan struct{}{}}
	oc, err := js.OrderedConsumer(ctx, rawResults, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"rawb.result.>"}, DeliverPolicy: jetstream.DeliverNewPolicy})
	if err != nil {
		return nil, err
	}
	s.cc, err = oc.Consume(func(m jetstream.Msg) {
		id := m.Headers().Get("Task-Id")
		s.mu.Lock()
		ch := s.waiting[id]
		delete(s.waiting, id)
		s.mu.Unlock()
		if ch != nil {
			close(ch)
		}
	})
	return s, err
}

// startWorkers starts n worker replicas, each with its own connection and
// slots goroutines pulling one task at a time.
func (s *rawSystem) startWorkers(ctx context.Context, url string, n, slots int) error {
	for range n {
		w, err := startRawWorker(ctx, url, slots)
		if err != nil {
			return err
		}
		s.workers = append(s.workers, w)
	}
	return nil
}

func (s *rawSystem) stopWorkers() {
	for _, w := range s.workers {
		w.stop()
	}
	s.workers = nil
}

func (s *rawSystem) call(ctx context.Context) error {
	id := protocol.NewID()
	ch := make(chan struct{})
	s.mu.Lock()
	s.waiting[id] = ch
	s.mu.Unlock()
	msg := nats.NewMsg("rawb.task.noop")
	msg.Header.Set(jetstream.MsgIDHeader, id)
	msg.Data = []byte(fmt.Sprintf(`{"task_id":%q,"tool":"noop","args":{},"conversation_id":"c"}`, id))
	if _, err := s.js.PublishMsg(ctx, msg); err != nil {
		return err
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *rawSystem) close() {
	s.stopWorkers()
	s.cc.Stop()
	s.nc.Close()
}

type rawWorker struct {
	nc     *nats.Conn
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startRawWorker(ctx context.Context, url string, slots int) (*rawWorker, error) {
	nc, err := nats.Connect(url)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	cons, err := js.Consumer(ctx, rawTasks, natsjs.TaskConsumerName("noop"))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &rawWorker{nc: nc, cancel: cancel}
	handle := func(m jetstream.Msg) {
		id := m.Headers().Get(jetstream.MsgIDHeader)
		res := nats.NewMsg("rawb.result.c." + id)
		res.Header.Set(jetstream.MsgIDHeader, "res:"+id)
		res.Header.Set("Task-Id", id)
		res.Data = []byte(fmt.Sprintf(`{"task_id":%q,"status":"ok","content":null}`, id))
		if _, err := js.PublishMsg(ctx, res); err == nil {
			_ = m.Ack()
		}
	}
	for range slots {
		w.wg.Go(func() {
			for ctx.Err() == nil {
				m, err := cons.Next(jetstream.FetchMaxWait(time.Second))
				if err != nil {
					continue
				}
				handle(m)
			}
		})
	}
	return w, nil
}

func (w *rawWorker) stop() {
	w.cancel()
	w.wg.Wait()
	w.nc.Close()
}
