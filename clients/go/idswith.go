package idgen

import "context"

// IDOptions are the options of NextIDsWith and NextMaskedIDs (protocol version 5,
// GET_IDS_WITH: protocol/PROTOCOL.md §3.8). The zero value asks for nothing more than
// NextIDs does.
type IDOptions struct {
	// After, when not 0, is an ID the caller has seen (from any node of the cluster): every
	// ID answered is greater. The node waits, at most its clock's max_drift (default 1 s),
	// for its clock to pass the time of After; beyond that it answers 301
	// UNAVAILABLE_CLOCK. An After that is not an ID of the cluster, or lies more than 60 s
	// ahead of the node's clock, is 205 INVALID_OPTION. Passing on what a caller saw gives
	// it read-your-writes order; callers that pass nothing are not ordered to each other.
	// (0 means none: every ID is above 0 anyway but the cluster's very first.)
	After uint64
	// IdempotencyKey, when not "", is 1 to 64 visible ASCII bytes ('!' to '~'). On a node
	// started with an idempotency window, the same call (same n and options) with the same
	// key within the window gets the same IDs again, on any connection to THAT node. The
	// key picks the node: FNV-1a 64 of the key's bytes modulo len(Options.Nodes), in the
	// order given (KeyNode). A keyed call is never retried on another node (it would
	// issue new IDs): a failure that would move another call on is a *KeyedError. The same
	// key with another call is 206 IDEMPOTENCY_KEY_REUSED; while the first call with the key
	// is being answered, 207 IDEMPOTENCY_KEY_IN_FLIGHT; on a node without idempotency keys,
	// 205 INVALID_OPTION.
	IdempotencyKey string
}

// MaskedIDs are masked IDs from a node (NextMaskedIDs): the IDs masked with the node's
// current masking key (clients/vectors/MASK.md), in the IDs' order (masked values are in
// no order).
type MaskedIDs struct {
	// KeyID is the masking key's ID, 0..=61.
	KeyID int
	// Values are the masked integers (each below 2^Layout.IDBits()): a MaskKeyring with
	// the key unmasks one with UnmaskWithKey(v, KeyID, width).
	Values []uint64
	// Strings are their 12-character string forms: the key ID's base62 character and the
	// value in 11 base62 digits (MaskKeyring.UnmaskString takes one back).
	Strings []string
}

// fnv1a64 is FNV-1a 64 of b.
func fnv1a64(b string) uint64 {
	h := uint64(0xcbf29ce484222325)
	for i := 0; i < len(b); i++ {
		h ^= uint64(b[i])
		h *= 0x100000001b3
	}
	return h
}

// keyNodeIndex is the index of the node an idempotency key goes to among count nodes.
func keyNodeIndex(key string, count int) int {
	return int(fnv1a64(key) % uint64(count))
}

// KeyNode is the node ("host:port", from Options.Nodes) a call with this idempotency key
// goes to: FNV-1a 64 of the key's bytes, modulo the number of nodes, in the order given.
func (c *Client) KeyNode(key string) string {
	list := c.nodeList()
	return list[keyNodeIndex(key, len(list))].addr
}

// maskedString is a masked value's string form under key keyID (no key needed).
func maskedString(keyID int, v uint64) string {
	var out [MaskedStringLen]byte
	out[0] = base62Alphabet[keyID]
	for i := MaskedStringLen - 1; i >= 1; i-- {
		out[i] = base62Alphabet[v%62]
		v /= 62
	}
	return string(out[:])
}

// NextIDsWith returns n IDs from one node, strictly increasing, all or nothing, with the
// options of IDOptions (protocol version 5: one GET_IDS_WITH request). n must be within the
// node's max_batch (the request is never split: a key names one request). Without options
// it is NextIDs. On a node that negotiated a version below 5 (or with Options.MaxVersion
// below 5) it fails at once with a *VersionError (ErrIDsWithUnsupported): nothing is sent
// and the options are never dropped silently. Without a key it fails over like NextIDs;
// with a key it goes to the key's node only (see IDOptions.IdempotencyKey).
func (c *Client) NextIDsWith(ctx context.Context, n int, opts IDOptions) ([]uint64, error) {
	ids, _, err := c.idsWith(ctx, "NextIDsWith", n, opts, false)
	return ids, err
}

// NextMaskedIDs returns n IDs from one node masked with the node's current masking key (a
// node started with IDGEN_MASK_KEYS; elsewhere 205 INVALID_OPTION), with the key's ID and
// the string forms. Options, versions and failover are as NextIDsWith's.
func (c *Client) NextMaskedIDs(ctx context.Context, n int, opts IDOptions) (MaskedIDs, error) {
	values, keyID, err := c.idsWith(ctx, "NextMaskedIDs", n, opts, true)
	if err != nil {
		return MaskedIDs{}, err
	}
	m := MaskedIDs{KeyID: int(keyID), Values: values, Strings: make([]string, len(values))}
	for i, v := range values {
		m.Strings[i] = maskedString(m.KeyID, v)
	}
	return m, nil
}

func (c *Client) idsWith(ctx context.Context, what string, n int, opts IDOptions, masked bool) ([]uint64, uint8, error) {
	if n < 1 || n > maxIDsPerCall {
		return nil, 0, argError("%s: n = %d: must be in 1..=%d", what, n, maxIDsPerCall)
	}
	if opts.After&topBit != 0 {
		return nil, 0, argError("%s: After %d is not an ID (at or above 2^63)", what, opts.After)
	}
	if opts.IdempotencyKey != "" {
		if err := checkIdempotencyKey(opts.IdempotencyKey); err != nil {
			return nil, 0, argError("%s: %v", what, err)
		}
	}
	if c.closed.Load() {
		return nil, 0, c.errClosed()
	}
	if c.opts.MaxVersion < IDsWithVersion {
		return nil, 0, &VersionError{Version: c.opts.MaxVersion, Required: IDsWithVersion}
	}
	var only *node
	if opts.IdempotencyKey != "" {
		list := c.nodeList() // the list as it is now (Options.Expand may change it)
		only = list[keyNodeIndex(opts.IdempotencyKey, len(list))]
	}
	var ids []uint64
	var keyID uint8
	op := "ids_with"
	if masked {
		op = "masked_ids"
	}
	err := c.runCall(ctx, op, n, only, func(cc *conn) error {
		if cc.hello.Version < IDsWithVersion {
			return &VersionError{Node: cc.node, Version: cc.hello.Version, Required: IDsWithVersion}
		}
		if uint64(n) > uint64(cc.hello.MaxBatch) {
			return argError("%s: n = %d is above the node's max_batch %d (one request, never split)", what, n, cc.hello.MaxBatch)
		}
		r := newRequest(1)
		s := &r.slots[0]
		s.op = opGetIDsWith
		s.dst = make([]uint64, n)
		s.hasAfter, s.after = opts.After != 0, opts.After
		s.key, s.masked = opts.IdempotencyKey, masked
		if err := cc.submit(r); err != nil {
			return err
		}
		c.stats.requests.Add(1)
		if err := r.wait(ctx, cc.node); err != nil {
			return err
		}
		ids, keyID = s.dst, s.keyID
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	return ids, keyID, nil
}
