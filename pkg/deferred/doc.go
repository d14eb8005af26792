// Package deferred holds the types of deferred tool calls: calls that wait
// for a person's approval or for a result computed elsewhere.
//
// A run that cannot finish because of such calls ends with [Requests]
// (the calls, grouped by category, with their metadata and stable ULID task
// IDs). The follow-up run takes [Results]: for each approval, true, false,
// a [ToolApproved] or a [ToolDenied]; for each external call, any JSON value,
// a tool.Return, a *tool.ModelRetry or a *tool.ToolFailed.
//
// Unlike Pydantic AI, this package fails closed: an approval value of any
// other type is an error ([ErrInvalidApproval]), [Requests.Remaining] filters
// each category by its own results, and [Requests.BuildResults] refuses IDs
// that are not pending in the category they are given for.
package deferred
