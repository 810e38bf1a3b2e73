package idgen

import "context"

// int64 forms of the calls, for what binds BIGINT as int64 (database/sql, pgx, sqlc's
// generated structs). Every ID and every sequence value is below 2^63 (the top bit is 0,
// checked on every answer before a call returns it), so each conversion is exact and never
// negative; these forms save every caller the uint64 to int64 conversion (and a linter's
// overflow warning about it).

// NextIDInt64 is NextID as an int64.
func (c *Client) NextIDInt64(ctx context.Context) (int64, error) {
	id, err := c.NextID(ctx)
	if err != nil {
		return 0, err
	}
	return int64(id), nil
}

// NextIDsInt64 is NextIDs as int64s.
func (c *Client) NextIDsInt64(ctx context.Context, n int) ([]int64, error) {
	ids, err := c.NextIDs(ctx, n)
	if err != nil {
		return nil, err
	}
	return int64s(ids), nil
}

// NextValueInt64 is NextValue as an int64.
func (c *Client) NextValueInt64(ctx context.Context, name string) (int64, error) {
	v, err := c.NextValue(ctx, name)
	if err != nil {
		return 0, err
	}
	return int64(v), nil
}

// NextValuesInt64 is NextValues as int64s.
func (c *Client) NextValuesInt64(ctx context.Context, name string, n int) ([]int64, error) {
	vs, err := c.NextValues(ctx, name, n)
	if err != nil {
		return nil, err
	}
	return int64s(vs), nil
}

// NextIDsWithInt64 is NextIDsWith as int64s.
func (c *Client) NextIDsWithInt64(ctx context.Context, n int, opts IDOptions) ([]int64, error) {
	ids, err := c.NextIDsWith(ctx, n, opts)
	if err != nil {
		return nil, err
	}
	return int64s(ids), nil
}

// Int64s are the masked values as int64s (each below 2^63: a masked ID keeps its layout's
// width, checked when decoded).
func (m MaskedIDs) Int64s() []int64 { return int64s(m.Values) }

// int64s converts IDs or values, each below 2^63 (checked when decoded).
func int64s(u []uint64) []int64 {
	out := make([]int64, len(u))
	for i, v := range u {
		out[i] = int64(v)
	}
	return out
}
