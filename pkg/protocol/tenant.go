package protocol

import (
	"errors"
	"fmt"
	"regexp"
)

// TenantPattern is what a tenant (SPEC §19: a conversation's, carried on
// each of its tasks) must match: 1 to 64 letters, digits, '.', '_' or '-',
// beginning with a letter or digit, so that it fits a header, a limit's
// key and a log line as it is.
const TenantPattern = `^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`

var tenantRE = regexp.MustCompile(TenantPattern)

// ErrInvalidTenant is wrapped by the error of [ValidateTenant].
var ErrInvalidTenant = errors.New("protocol: invalid tenant")

// ValidateTenant returns an error wrapping [ErrInvalidTenant] when tenant
// does not match [TenantPattern]. The empty tenant (none) is valid.
func ValidateTenant(tenant string) error {
	if tenant != "" && !tenantRE.MatchString(tenant) {
		return fmt.Errorf("%w: %q must match %s", ErrInvalidTenant, tenant, TenantPattern)
	}
	return nil
}
