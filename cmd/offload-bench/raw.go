package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/internal/benchcall"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/protocol"
)

// rawMode is how a raw worker reads its tasks.
type rawMode int

const (
	// rawBatched is the fastest idiomatic nats.go pattern: one
	// Consumer.Messages per replica with PullMaxMessages = slots (the
	// client keeps up to that many tasks pulled ahead), each task handled
	// on its own goroutine, at most slots at once.
	rawBatched rawMode = iota
	// rawNext pulls one task at a time per slot with Consumer.Next.
	rawNext
)

// rawSystem is a baseline: the same publish → consume → publish → consume
// path written directly with nats.go, with none of offload's checks, over
// streams and a consumer built from the same definitions as offload's
// (jetstream/, under its own prefix). Tasks go to the work-queue stream with
// Nats-Msg-Id (synchronous PubAck); a worker decodes the task, builds its
// result, publishes it to the results stream with Nats-Msg-Id
// res:<task>, waits for its PubAck and acks the task; the caller reads
// results with one ordered consumer, decodes them and routes them by task.
type rawSystem struct {
	mode    rawMode
	prefix  string
	nc      *nats.Conn
	js      jetstream.JetStream
	mu      sync.Mutex
	waiting map[string]chan error
	cc      jetstream.ConsumeContext
	workers []*rawWorker
}

// rawTask and rawResult are the baseline's payloads, shaped like offload's.
type rawTask struct {
	TaskID         string          `json:"task_id"`
	Tool           string          `json:"tool"`
	Args           json.RawMessage `json:"args"`
	ConversationID string          `json:"conversation_id"`
}

type rawResult struct {
	TaskID  string          `json:"task_id"`
	Status  string          `json:"status"`
	Content json.RawMessage `json:"content"`
}

func newRawSystem(ctx context.Context, ep endpoint, prefix string, mode rawMode) (*rawSystem, error) {
	nc, err := ep.connect("bench raw")
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	popts := natsjs.ProvisionOptions{Prefix: prefix}
	streams, err := natsjs.StreamConfigs(popts)
	if err != nil {
		return nil, err
	}
	for _, cfg := range streams {
		_ = js.DeleteStream(ctx, cfg.Name)
		if _, err := js.CreateStream(ctx, cfg); err != nil {
			return nil, err
		}
	}
	ccfg, err := natsjs.TaskConsumerConfig("lookup", popts)
	if err != nil {
		return nil, err
	}
	names := natsjs.NamesFor(prefix)
	if _, err := js.CreateOrUpdateConsumer(ctx, names.Tasks, ccfg); err != nil {
		return nil, err
	}
	s := &rawSystem{mode: mode, prefix: prefix, nc: nc, js: js, waiting: map[string]chan error{}}
	oc, err := js.OrderedConsumer(ctx, names.Results, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{prefix + ".result.>"}, DeliverPolicy: jetstream.DeliverNewPolicy})
	if err != nil {
		return nil, err
	}
	s.cc, err = oc.Consume(func(m jetstream.Msg) {
		// <prefix>.result.<conv>.<task>.lookup: the task is the next to last token.
		subj := strings.TrimSuffix(m.Subject(), ".lookup")
		id := subj[strings.LastIndexByte(subj, '.')+1:]
		var res rawResult
		err := json.Unmarshal(m.Data(), &res)
		if err == nil && (res.TaskID != id || res.Status != "ok") {
			err = fmt.Errorf("result %s/%s on the subject of %s", res.TaskID, res.Status, id)
		}
		s.mu.Lock()
		ch := s.waiting[id]
		delete(s.waiting, id)
		s.mu.Unlock()
		if ch != nil {
			ch <- err
		}
	})
	return s, err
}

// startWorkers starts n worker replicas, each with its own connection and
// slots concurrent tasks.
func (s *rawSystem) startWorkers(ctx context.Context, ep endpoint, n, slots int) error {
	for range n {
		w, err := s.startWorker(ctx, ep, slots)
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
	ch := make(chan error, 1)
	s.mu.Lock()
	s.waiting[id] = ch
	s.mu.Unlock()
	data, err := json.Marshal(rawTask{TaskID: id, Tool: "lookup", Args: json.RawMessage(benchcall.Args), ConversationID: benchConv})
	if err != nil {
		return err
	}
	msg := nats.NewMsg(s.prefix + ".task.lookup")
	msg.Header.Set(jetstream.MsgIDHeader, id)
	msg.Data = data
	if _, err := s.js.PublishMsg(ctx, msg); err != nil {
		return err
	}
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *rawSystem) close() {
	s.stopWorkers()
	s.cc.Stop()
	s.nc.Close()
}

// benchConv is the conversation of the raw baselines' tasks.
var benchConv = protocol.NewID()

type rawWorker struct {
	nc   *nats.Conn
	stop func()
}

// handle is the raw worker's job: decode the task and its arguments, build
// the result, publish it (awaiting its PubAck), then ack the task.
func (s *rawSystem) handle(ctx context.Context, js jetstream.JetStream, m jetstream.Msg) {
	var t rawTask
	var a benchcall.LookupArgs
	if err := json.Unmarshal(m.Data(), &t); err != nil || json.Unmarshal(t.Args, &a) != nil || a.Query == "" {
		_ = m.Term()
		return
	}
	content, _ := json.Marshal(benchcall.Output)
	data, _ := json.Marshal(rawResult{TaskID: t.TaskID, Status: "ok", Content: content})
	res := nats.NewMsg(s.prefix + ".result." + t.ConversationID + "." + t.TaskID + ".lookup")
	res.Header.Set(jetstream.MsgIDHeader, "res:"+t.TaskID)
	res.Data = data
	if _, err := js.PublishMsg(ctx, res); err == nil {
		_ = m.Ack()
	}
}

func (s *rawSystem) startWorker(ctx context.Context, ep endpoint, slots int) (*rawWorker, error) {
	nc, err := ep.connect("bench raw")
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	cons, err := js.Consumer(ctx, natsjs.NamesFor(s.prefix).Tasks, natsjs.TaskConsumerName("lookup"))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var it jetstream.MessagesContext
	w := &rawWorker{nc: nc, stop: func() {
		if it != nil {
			it.Stop()
		}
		cancel()
		wg.Wait()
		nc.Close()
	}}
	switch s.mode {
	case rawBatched:
		it, err = cons.Messages(jetstream.PullMaxMessages(slots))
		if err != nil {
			w.stop()
			return nil, err
		}
		sem := make(chan struct{}, slots)
		wg.Go(func() {
			for {
				m, err := it.Next()
				if err != nil {
					if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
						return
					}
					continue
				}
				sem <- struct{}{}
				wg.Go(func() {
					defer func() { <-sem }()
					s.handle(ctx, js, m)
				})
			}
		})
	case rawNext:
		for range slots {
			wg.Go(func() {
				for ctx.Err() == nil {
					m, err := cons.Next(jetstream.FetchMaxWait(time.Second))
					if err != nil {
						continue
					}
					s.handle(ctx, js, m)
				}
			})
		}
	}
	return w, nil
}
