package credfiles

import (
	"fmt"
	"os"

	"github.com/paymentsd/paymentsd/daemon/auth"
)

// apart refuses operators' keys that are customers' keys. The two files
// may be one file, however linked: a symbolic link, a hard link, one
// Secret mounted twice. Or a token is listed in both, by a copy or a
// single line. A customer's token must never open the console.
func apart(apiPath, adminPath string, api, admin *auth.Keys) error {
	a, errA := os.Stat(apiPath)
	o, errO := os.Stat(adminPath)
	if errA == nil && errO == nil && os.SameFile(a, o) {
		return fmt.Errorf("--admin-keys %s and --api-keys %s are the same file: a customer's token must not be an operator's", adminPath, apiPath)
	}
	if operator, principal, shared := admin.Shared(api); shared {
		return fmt.Errorf("--admin-keys %s and --api-keys %s list one token, operator %q's and principal %q's: a customer's token must not be an operator's",
			adminPath, apiPath, operator, principal)
	}
	return nil
}
