package convstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/internal/direct"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jsop"
	"github.com/offload-dev/offload/pkg/protocol"
)

// Config configures a [Store].
type Config struct {
	// JetStream is the JetStream context. Required.
	JetStream jetstream.JetStream
	// Provision names the buckets (its Prefix) and says how to create
	// them when missing (replicas, memory storage).
	Provision natsjs.ProvisionOptions
	// MaxInline is the largest state, in bytes, kept whole in the KV
	// bucket; the history of a larger one goes to the object store.
	// Defaults to three quarters of the server's max payload.
	MaxInline int
	// LeaseTTL is how long a lease outlives its holder's last renewal,
	// and how long Claim waits for another holder. Defaults to
	// [conversation.LeaseTTL].
	LeaseTTL time.Duration
	// Logger receives the store's logs. Defaults to discarding them.
	Logger *slog.Logger
}

// Store is the JetStream [conversation.Store] (SPEC §5.5): the
// state of conversation <id> is the key conv.<id> of the KV bucket
// <prefix>_conversations, saved with compare-and-set on the key's
// revision; a history too large for one message is an object of the
// bucket <prefix>_histories named <id>.<ULID> (one per save, the previous
// one deleted once the new state is stored); the lease is the key
// lease.<id>. Both buckets keep a conversation for their max age (the
// store's retention) after its last save. Every save also writes the
// conversation's pending record, the [conversation.Summary] that people
// and UIs read, to the key <id> of the bucket <prefix>_pending (deleted
// when nothing is pending): a projection, repaired by the next save when
// a crash came between the two writes.
type Store struct {
	cfg     Config
	log     *slog.Logger
	names   natsjs.Names
	kv      jetstream.KeyValue
	obj     jetstream.ObjectStore
	pending jetstream.KeyValue
	records direct.Keys      // the pending bucket's keys as messages (holding.go)
	index   jetstream.Stream // the index of pending calls (pindex.go)
	// statusIndex is the index of the conversations' statuses (sindex.go).
	statusIndex jetstream.Stream
	// publishStatus publishes a message of it without waiting
	// (JetStream.PublishMsgAsync; a fault in tests).
	publishStatus func(*nats.Msg, ...jetstream.PublishOpt) (jetstream.PubAckFuture, error)
	// cleaning counts the removals under way off the writers' path, of
	// the index of statuses' former messages (sindex.go cleanStatuses)
	// and of the index of pending calls' entries (pindex.go indexAfter),
	// each bounded by cleanTimeout: [Store.Flush] waits for them.
	cleaning sync.WaitGroup
	batches  *direct.Batches // its reads
	// repairGrace is how old an entry RepairIndex removes must be.
	repairGrace time.Duration

	mu      sync.Mutex
	objects map[string]string   // conversation → history object last read or written
	held    map[string]*holding // the conversations whose lease this process holds (holding.go)
	// unindexing holds, by conversation, the end of its last removal of
	// entries of the index of pending calls under way (pindex.go).
	unindexing map[string]chan struct{}
	// removals, when set (tests, under mu), is received from before each removal
	// of entries of the index of pending calls off a save's path.
	removals chan struct{}
	// waitsRemoval, when set (tests, under mu), is called when a save
	// waits for a removal under way before it adds entries.
	waitsRemoval func()
}

var _ conversation.Store = (*Store)(nil)

const (
	convKeyPre  = "conv."
	leaseKeyPre = "lease."
)

// New ensures the buckets' streams (from the definitions,
// as [natsjs.Provision] does) and binds them.
func New(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.JetStream == nil {
		return nil, fmt.Errorf("%w: conversation store: no JetStream", natsjs.ErrInvalidConfig)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	names := natsjs.NamesFor(cfg.Provision.Prefix)
	if err := natsjs.EnsureStreams(ctx, cfg.JetStream, cfg.Provision, names.ConversationsStream, names.HistoriesStream, names.PendingStream, names.PendingIndex, names.StatusIndex); err != nil {
		return nil, err
	}
	kv, err := natsjs.BindBucket(ctx, cfg.JetStream, names.ConversationsBucket)
	if err != nil {
		return nil, err
	}
	obj, err := cfg.JetStream.ObjectStore(ctx, names.HistoriesBucket)
	if err != nil {
		return nil, fmt.Errorf("natsjs: bind object store %s: %w", names.HistoriesBucket, err)
	}
	pending, err := natsjs.BindBucket(ctx, cfg.JetStream, names.PendingBucket)
	if err != nil {
		return nil, err
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = conversation.LeaseTTL
	}
	if cfg.MaxInline <= 0 {
		cfg.MaxInline = 768 << 10
		if nc := cfg.JetStream.Conn(); nc != nil && nc.MaxPayload() > 0 {
			cfg.MaxInline = int(nc.MaxPayload()) * 3 / 4
		}
	}
	index, err := cfg.JetStream.Stream(ctx, names.PendingIndex)
	if err != nil {
		return nil, fmt.Errorf("natsjs: bind stream %s: %w", names.PendingIndex, err)
	}
	statusIndex, err := cfg.JetStream.Stream(ctx, names.StatusIndex)
	if err != nil {
		return nil, fmt.Errorf("natsjs: bind stream %s: %w", names.StatusIndex, err)
	}
	records := direct.Keys{JS: cfg.JetStream, NC: cfg.JetStream.Conn(), Stream: names.PendingStream, Bucket: names.PendingBucket}
	return &Store{statusIndex: statusIndex, publishStatus: cfg.JetStream.PublishMsgAsync, cfg: cfg, log: log, names: names, kv: kv, records: records, index: index, batches: direct.NewBatches(cfg.JetStream.Conn()), repairGrace: repairGrace,
		obj: obj, pending: pending, objects: map[string]string{}, held: map[string]*holding{}, unindexing: map[string]chan struct{}{}}, nil
}

// stored is the value of a conversation's key.
type stored struct {
	// State is the state's JSON form (conversation.Encode); without its
	// history when HistoryObject is set.
	State json.RawMessage `json:"state"`
	// HistoryObject names the object holding the history.
	HistoryObject string `json:"history_object,omitempty"`
}

func checkConvID(id string) error {
	if _, err := protocol.ParseID(id); err != nil {
		return fmt.Errorf("natsjs: conversation ID %q: %w", id, err)
	}
	return nil
}

// Load implements [conversation.Store].
func (s *Store) Load(ctx context.Context, id string) (*conversation.State, conversation.Revision, error) {
	if err := checkConvID(id); err != nil {
		return nil, 0, err
	}
	held := s.holds(id)
	var record sync.WaitGroup
	if held {
		// The pending record's revision, beside the state's read: the
		// run's first projection then needs no read (holding.go).
		record.Go(func() { s.readRecord(ctx, id) })
	}
	defer record.Wait()
	st, rev, object, err := s.load(ctx, id)
	if err != nil {
		return nil, 0, err
	}
	if held {
		// Only a holder saves: what it read is the object its next save
		// replaces (a reader's would be kept here for nothing).
		s.remember(id, object)
	}
	return st, rev, nil
}

// load reads conversation id's state and returns it with its revision
// and the name of the object holding its history ("" when inline).
func (s *Store) load(ctx context.Context, id string) (*conversation.State, conversation.Revision, string, error) {
	var e jetstream.KeyValueEntry
	_, err := jsop.Retry(ctx, s.log, "conversation store", func(ctx context.Context) (err error) {
		e, err = s.kv.Get(ctx, convKeyPre+id)
		return err
	})
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, "", fmt.Errorf("%w: %s", conversation.ErrNotFound, id)
	}
	if err != nil {
		return nil, 0, "", fmt.Errorf("natsjs: load conversation %s: %w", id, err)
	}
	var v stored
	if err := json.Unmarshal(e.Value(), &v); err != nil {
		return nil, 0, "", fmt.Errorf("natsjs: load conversation %s: %w", id, err)
	}
	st, err := conversation.Decode(v.State)
	if err != nil {
		return nil, 0, "", fmt.Errorf("natsjs: load conversation %s: %w", id, err)
	}
	if v.HistoryObject != "" {
		var data []byte
		_, err := jsop.Retry(ctx, s.log, "conversation store", func(ctx context.Context) (err error) {
			data, err = s.obj.GetBytes(ctx, v.HistoryObject)
			return err
		})
		if err != nil {
			return nil, 0, "", fmt.Errorf("natsjs: load conversation %s: history %s: %w", id, v.HistoryObject, err)
		}
		if err := json.Unmarshal(data, &st.History); err != nil {
			return nil, 0, "", fmt.Errorf("natsjs: load conversation %s: history: %w", id, err)
		}
	}
	return st, conversation.Revision(e.Revision()), v.HistoryObject, nil
}

// remember records the history object of conversation id last read or
// written.
func (s *Store) remember(id, object string) {
	s.mu.Lock()
	s.objects[id] = object
	s.mu.Unlock()
}

// Save implements [conversation.Store].
func (s *Store) Save(ctx context.Context, st *conversation.State, prev conversation.Revision) (conversation.Revision, error) {
	if st == nil {
		return 0, errors.New("natsjs: save conversation: nil state")
	}
	if err := checkConvID(st.ID); err != nil {
		return 0, err
	}
	data, err := conversation.Encode(st)
	if err != nil {
		return 0, err
	}
	v := stored{State: data}
	if len(data) > s.cfg.MaxInline {
		// The history goes to its own object, named anew for each save so
		// that a failed compare-and-set leaves the stored one intact.
		hist, err := json.Marshal(st.History)
		if err != nil {
			return 0, fmt.Errorf("natsjs: save conversation %s: history: %w", st.ID, err)
		}
		bare := *st
		bare.History = message.History{}
		if v.State, err = conversation.Encode(&bare); err != nil {
			return 0, err
		}
		v.HistoryObject = st.ID + "." + protocol.NewID()
		meta := jetstream.ObjectMeta{Name: v.HistoryObject, Opts: &jetstream.ObjectMetaOptions{ChunkSize: s.chunkSize()}}
		if _, err := jsop.Retry(ctx, s.log, "conversation store", func(ctx context.Context) error {
			_, err := s.obj.Put(ctx, meta, bytes.NewReader(hist))
			return err
		}); err != nil {
			return 0, fmt.Errorf("natsjs: save conversation %s: history: %w", st.ID, err)
		}
	}
	value, err := json.Marshal(v)
	if err != nil {
		return 0, fmt.Errorf("natsjs: save conversation %s: %w", st.ID, err)
	}
	key := convKeyPre + st.ID
	var rev uint64
	retried, err := jsop.Retry(ctx, s.log, "conversation store", func(ctx context.Context) (err error) {
		if prev == 0 {
			rev, err = s.kv.Create(ctx, key, value)
		} else {
			rev, err = s.kv.Update(ctx, key, value, uint64(prev))
		}
		return err
	})
	if retried && (errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch)) {
		// An attempt whose answer was lost may have been applied: the
		// conflict is ours if the stored value is what we wrote.
		if e, gerr := s.kv.Get(ctx, key); gerr == nil && bytes.Equal(e.Value(), value) {
			rev, err = e.Revision(), nil
		}
	}
	switch {
	case errors.Is(err, jetstream.ErrKeyExists):
		err = fmt.Errorf("%w: %s already exists", conversation.ErrConflict, st.ID)
	case errors.Is(err, jetstream.ErrKeyRevisionMismatch):
		err = fmt.Errorf("%w: %s is past revision %d", conversation.ErrConflict, st.ID, prev)
	}
	if err != nil {
		if v.HistoryObject != "" {
			s.deleteObject(v.HistoryObject)
		}
		if !errors.Is(err, conversation.ErrConflict) {
			err = fmt.Errorf("natsjs: save conversation %s: %w", st.ID, err)
		}
		return 0, err
	}
	s.mu.Lock()
	old := s.objects[st.ID]
	s.objects[st.ID] = v.HistoryObject
	s.mu.Unlock()
	if old != "" && old != v.HistoryObject {
		s.deleteObject(old)
	}
	if err := s.project(ctx, st, conversation.Revision(rev)); err != nil {
		// The state is saved: the next save writes the record again.
		s.log.Warn("pending record not written", slog.String("conversation", st.ID), slog.Any("error", err))
	}
	return conversation.Revision(rev), nil
}

// chunkSize is the object store's chunk size: its default (128 KiB), or
// less for a server whose max payload is smaller.
func (s *Store) chunkSize() uint32 {
	size := int64(128 << 10)
	if nc := s.cfg.JetStream.Conn(); nc != nil && nc.MaxPayload() > 0 {
		size = min(size, nc.MaxPayload()/2)
	}
	return uint32(size)
}

// deleteObject deletes a history no state refers to any more; one left
// behind (a crash) expires with the bucket's max age.
func (s *Store) deleteObject(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), jsop.Timeout)
	defer cancel()
	if err := s.obj.Delete(ctx, name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		s.log.Warn("old history not deleted", slog.String("object", name), slog.Any("error", err))
	}
}

// List implements [conversation.Store].
func (s *Store) List(ctx context.Context) ([]string, error) {
	l, err := s.kv.ListKeysFiltered(ctx, convKeyPre+"*")
	if err != nil {
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil, nil
		}
		return nil, fmt.Errorf("natsjs: list conversations: %w", err)
	}
	var ids []string
	for k := range l.Keys() { // closed when every key was listed
		ids = append(ids, strings.TrimPrefix(k, convKeyPre))
	}
	slices.Sort(ids)
	return ids, nil
}
