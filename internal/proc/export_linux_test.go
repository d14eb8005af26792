package proc

// Exported for the tests of package proc_test.
var (
	ToolUserFor = toolUser
	ReadAsOwner = readAsOwner
	ScopeEnvOf  = scopeEnv
)
