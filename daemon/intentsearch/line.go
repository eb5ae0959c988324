package intentsearch

import (
	"time"

	"github.com/paymentsd/paymentsd/daemon/server"
)

// Line is one intent as an operator is shown it: the JSON of paymentsd
// intents and of the console's API. One type, so that both faces say the
// same thing.
type Line struct {
	ID         string    `json:"id"`
	Key        string    `json:"key"` // "" for an intent made without one
	CreateTime time.Time `json:"create_time"`
	State      string    `json:"state"` // the enum's name: STATE_CREATED
	Amount     string    `json:"amount"`
	Payer      string    `json:"payer"`
	Merchant   string    `json:"merchant"`
	Chain      string    `json:"chain"`
	Token      string    `json:"token"`
}

// LineOf is f as an operator is shown it.
func LineOf(f server.FoundIntent) Line {
	pi := f.Intent
	return Line{ID: pi.GetId(), Key: f.Key, CreateTime: pi.GetCreateTime().AsTime(), State: pi.GetState().String(),
		Amount: pi.GetAmount(), Payer: pi.GetPayer(), Merchant: pi.GetMerchant(), Chain: pi.GetChain(), Token: pi.GetToken()}
}

// GroupLine is a Group as an operator is shown it: its intents, newest
// first, and how many keys made them ("" counting as one).
type GroupLine struct {
	Keys    int    `json:"keys"`
	Intents []Line `json:"intents"`
}

// GroupLineOf is g as an operator is shown it.
func GroupLineOf(g Group) GroupLine {
	l := GroupLine{Intents: make([]Line, 0, len(g))}
	keys := map[string]bool{}
	for _, f := range g {
		l.Intents = append(l.Intents, LineOf(f))
		keys[f.Key] = true
	}
	l.Keys = len(keys)
	return l
}
