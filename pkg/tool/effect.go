package tool

// The metadata of a call whose effect is unknown (SPEC §13): a worker
// answers an attempt that was started by a worker that stopped before its
// result was stored, for a tool not declared [Idempotent], with an
// [ApprovalRequired] carrying {"offload.effect":"unknown","worker",
// "started_at"}, rather than run it again: a person decides. Approved, the
// call runs again as its task's next attempt; denied, the model is told
// that its outcome is unknown.
const (
	// EffectMetaKey is the metadata key "offload.effect".
	EffectMetaKey = "offload.effect"
	// EffectUnknown is its value for an unknown effect.
	EffectUnknown = "unknown"
)
