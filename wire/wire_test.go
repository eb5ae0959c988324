package wire_test

import (
	"testing"

	"github.com/paymentsd/paymentsd/wire"
)

func TestValidateMethod(t *testing.T) {
	for name, ok := range map[string]bool{
		"/shop.v1.Orders/PlaceOrder":  true,
		"/S/M":                        true,
		"shop.v1.Orders/PlaceOrder":   false, // no leading slash
		"/shop.v1.Orders":             false,
		"/shop.v1.Orders/":            false,
		"//PlaceOrder":                false,
		"/shop.v1.Orders/Place/Order": false,
		"/shop.v1.Orders/Place Order": false,
		"/shop v1.Orders/PlaceOrder":  false,
		"":                            false,
	} {
		if err := wire.ValidateMethod(name); (err == nil) != ok {
			t.Errorf("ValidateMethod(%q) = %v, want ok %t", name, err, ok)
		}
	}
}
