package qdranttest

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/qdrant/go-client/qdrant"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ragtail/ragtail/rag/retrieve"
)

// store holds the collections; it survives Stop and Restart.
type store struct {
	mu          sync.RWMutex
	collections map[string]*collection
	operation   atomic.Uint64
}

func newStore() *store { return &store{collections: map[string]*collection{}} }

func (st *store) get(name string) *collection {
	st.mu.RLock()
	defer st.mu.RUnlock()
	return st.collections[name]
}

// lookup returns the collection or Qdrant's NotFound error.
func (st *store) lookup(name string) (*collection, error) {
	if c := st.get(name); c != nil {
		return c, nil
	}
	return nil, status.Errorf(codes.NotFound, "Not found: Collection `%s` doesn't exist!", name)
}

// collection is one Qdrant collection: an exact cosine index plus the points' payloads.
type collection struct {
	dim  int
	meta map[string]*qdrant.Value

	mu     sync.RWMutex
	index  *retrieve.Memory
	points map[string]*point // by pointKey
	order  []string          // sorted keys, nil when stale
}

type point struct {
	id      *qdrant.PointId
	payload map[string]*qdrant.Value
	vec     []float32
}

func newCollection(dim int, meta map[string]*qdrant.Value) (*collection, error) {
	idx, err := retrieve.NewMemory(dim, 1)
	if err != nil {
		return nil, err
	}
	return &collection{dim: dim, meta: meta, index: idx, points: map[string]*point{}}, nil
}

func (c *collection) len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.points)
}

// pointKey is the index id of a point: "n<number>" or "u<uuid>", so the two id kinds never meet.
func pointKey(id *qdrant.PointId) (string, error) {
	switch {
	case id == nil:
		return "", status.Error(codes.InvalidArgument, "Wrong input: point id is missing")
	case id.GetUuid() != "":
		return "u" + strings.ToLower(id.GetUuid()), nil
	}
	if _, ok := id.GetPointIdOptions().(*qdrant.PointId_Num); ok {
		return "n" + strconv.FormatUint(id.GetNum(), 10), nil
	}
	return "", status.Error(codes.InvalidArgument, "Wrong input: point id is empty")
}

// keyLess orders keys as Qdrant orders ids: numbers first, ascending, then UUIDs.
func keyCompare(a, b string) int {
	if a[0] != b[0] {
		return cmp.Compare(a[0], b[0]) // 'n' < 'u'
	}
	if a[0] == 'n' {
		x, _ := strconv.ParseUint(a[1:], 10, 64)
		y, _ := strconv.ParseUint(b[1:], 10, 64)
		return cmp.Compare(x, y)
	}
	return strings.Compare(a, b)
}

// sortedKeys returns the keys in id order; the caller holds c.mu (read or write).
func (c *collection) sortedKeys() []string {
	if c.order != nil {
		return c.order
	}
	keys := make([]string, 0, len(c.points))
	for k := range c.points {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, keyCompare)
	return keys
}

func denseOf(v *qdrant.Vector) []float32 {
	if d := v.GetDense().GetData(); len(d) > 0 {
		return d
	}
	return v.GetData() //nolint:staticcheck // the deprecated field older clients still fill
}

func selectPayload(sel *qdrant.WithPayloadSelector, all bool, payload map[string]*qdrant.Value) map[string]*qdrant.Value {
	switch {
	case sel == nil && !all:
		return nil
	case sel.GetInclude() != nil:
		out := map[string]*qdrant.Value{}
		for _, f := range sel.GetInclude().GetFields() {
			if v, ok := payload[f]; ok {
				out[f] = v
			}
		}
		return out
	case sel.GetExclude() != nil:
		out := map[string]*qdrant.Value{}
		for k, v := range payload {
			if !slices.Contains(sel.GetExclude().GetFields(), k) {
				out[k] = v
			}
		}
		return out
	case sel == nil || sel.GetEnable():
		return payload
	}
	return nil
}

func (st *store) completed() *qdrant.PointsOperationResponse {
	op := st.operation.Add(1)
	return &qdrant.PointsOperationResponse{Result: &qdrant.UpdateResult{OperationId: &op, Status: qdrant.UpdateStatus_Completed}}
}

// collectionsService implements Qdrant's Collections service.
type collectionsService struct {
	qdrant.UnimplementedCollectionsServer
	s *Server
}

func (cs collectionsService) Create(_ context.Context, req *qdrant.CreateCollection) (*qdrant.CollectionOperationResponse, error) {
	name := req.GetCollectionName()
	if name == "" {
		return nil, status.Error(codes.InvalidArgument, "Wrong input: collection name is empty")
	}
	params := req.GetVectorsConfig().GetParams()
	switch {
	case params == nil:
		return nil, status.Error(codes.InvalidArgument, "Wrong input: qdranttest supports one unnamed dense vector per point")
	case params.GetSize() == 0 || params.GetSize() > 65536:
		return nil, status.Errorf(codes.InvalidArgument, "Wrong input: vector size %d must be between 1 and 65536", params.GetSize())
	case params.GetDistance() != qdrant.Distance_Cosine:
		return nil, status.Errorf(codes.InvalidArgument, "Wrong input: qdranttest supports Cosine distance only, not %s", params.GetDistance())
	}
	c, err := newCollection(int(params.GetSize()), req.GetMetadata())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	st := cs.s.store
	st.mu.Lock()
	defer st.mu.Unlock()
	if _, ok := st.collections[name]; ok {
		// Qdrant answers InvalidArgument, not AlreadyExists.
		return nil, status.Errorf(codes.InvalidArgument, "Wrong input: Collection `%s` already exists!", name)
	}
	st.collections[name] = c
	return &qdrant.CollectionOperationResponse{Result: true}, nil
}

func (cs collectionsService) Get(_ context.Context, req *qdrant.GetCollectionInfoRequest) (*qdrant.GetCollectionInfoResponse, error) {
	c, err := cs.s.store.lookup(req.GetCollectionName())
	if err != nil {
		return nil, err
	}
	n := uint64(c.len())
	return &qdrant.GetCollectionInfoResponse{Result: &qdrant.CollectionInfo{
		Status:              qdrant.CollectionStatus_Green,
		SegmentsCount:       1,
		PointsCount:         &n,
		IndexedVectorsCount: &n,
		Config: &qdrant.CollectionConfig{
			Params: &qdrant.CollectionParams{
				ShardNumber:   1,
				VectorsConfig: qdrant.NewVectorsConfig(&qdrant.VectorParams{Size: uint64(c.dim), Distance: qdrant.Distance_Cosine}),
			},
			Metadata: c.meta,
		},
	}}, nil
}

func (cs collectionsService) List(context.Context, *qdrant.ListCollectionsRequest) (*qdrant.ListCollectionsResponse, error) {
	st := cs.s.store
	st.mu.RLock()
	defer st.mu.RUnlock()
	resp := &qdrant.ListCollectionsResponse{}
	for name := range st.collections {
		resp.Collections = append(resp.Collections, &qdrant.CollectionDescription{Name: name})
	}
	slices.SortFunc(resp.Collections, func(a, b *qdrant.CollectionDescription) int { return strings.Compare(a.Name, b.Name) })
	return resp, nil
}

func (cs collectionsService) Delete(_ context.Context, req *qdrant.DeleteCollection) (*qdrant.CollectionOperationResponse, error) {
	st := cs.s.store
	st.mu.Lock()
	defer st.mu.Unlock()
	_, ok := st.collections[req.GetCollectionName()]
	delete(st.collections, req.GetCollectionName())
	return &qdrant.CollectionOperationResponse{Result: ok}, nil
}

func (cs collectionsService) CollectionExists(_ context.Context, req *qdrant.CollectionExistsRequest) (*qdrant.CollectionExistsResponse, error) {
	exists := cs.s.store.get(req.GetCollectionName()) != nil
	return &qdrant.CollectionExistsResponse{Result: &qdrant.CollectionExists{Exists: exists}}, nil
}

// pointsService implements Qdrant's Points service.
type pointsService struct {
	qdrant.UnimplementedPointsServer
	s *Server
}

func (ps pointsService) Upsert(_ context.Context, req *qdrant.UpsertPoints) (*qdrant.PointsOperationResponse, error) {
	c, err := ps.s.store.lookup(req.GetCollectionName())
	if err != nil {
		return nil, err
	}
	keys := make([]string, len(req.GetPoints()))
	vecs := make([][]float32, len(req.GetPoints()))
	for i, p := range req.GetPoints() {
		if keys[i], err = pointKey(p.GetId()); err != nil {
			return nil, err
		}
		if p.GetVectors().GetVectors() != nil {
			return nil, status.Error(codes.InvalidArgument, "Wrong input: qdranttest supports one unnamed dense vector per point")
		}
		vecs[i] = denseOf(p.GetVectors().GetVector())
		if len(vecs[i]) != c.dim {
			return nil, status.Errorf(codes.InvalidArgument, "Wrong input: Vector dimension error: expected dim: %d, got %d", c.dim, len(vecs[i]))
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.index.AddBatch(keys, vecs); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "Wrong input: %v", err)
	}
	for i, p := range req.GetPoints() {
		c.points[keys[i]] = &point{id: p.GetId(), payload: p.GetPayload(), vec: vecs[i]}
	}
	c.order = nil
	return ps.s.store.completed(), nil
}

func (ps pointsService) Delete(_ context.Context, req *qdrant.DeletePoints) (*qdrant.PointsOperationResponse, error) {
	c, err := ps.s.store.lookup(req.GetCollectionName())
	if err != nil {
		return nil, err
	}
	if req.GetPoints().GetFilter() != nil {
		return nil, status.Error(codes.Unimplemented, "qdranttest deletes by point ids only")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	removed := false
	for _, id := range req.GetPoints().GetPoints().GetIds() {
		key, err := pointKey(id)
		if err != nil {
			return nil, err
		}
		if _, ok := c.points[key]; ok {
			delete(c.points, key)
			removed = true
		}
	}
	if removed {
		// Memory cannot delete, so the index is rebuilt from what is left.
		idx, err := retrieve.NewMemory(c.dim, 1)
		if err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		keys := make([]string, 0, len(c.points))
		vecs := make([][]float32, 0, len(c.points))
		for k, p := range c.points {
			keys, vecs = append(keys, k), append(vecs, p.vec)
		}
		if err := idx.AddBatch(keys, vecs); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		c.index, c.order = idx, nil
	}
	return ps.s.store.completed(), nil
}

func (ps pointsService) Get(_ context.Context, req *qdrant.GetPoints) (*qdrant.GetResponse, error) {
	c, err := ps.s.store.lookup(req.GetCollectionName())
	if err != nil {
		return nil, err
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	resp := &qdrant.GetResponse{}
	for _, id := range req.GetIds() {
		key, err := pointKey(id)
		if err != nil {
			return nil, err
		}
		if p, ok := c.points[key]; ok {
			resp.Result = append(resp.Result, &qdrant.RetrievedPoint{Id: p.id, Payload: selectPayload(req.GetWithPayload(), true, p.payload)})
		}
	}
	return resp, nil
}

func (ps pointsService) Query(ctx context.Context, req *qdrant.QueryPoints) (*qdrant.QueryResponse, error) {
	c, err := ps.s.store.lookup(req.GetCollectionName())
	if err != nil {
		return nil, err
	}
	switch {
	case req.GetFilter() != nil || len(req.GetPrefetch()) > 0:
		return nil, status.Error(codes.Unimplemented, "qdranttest supports neither filters nor prefetch")
	case req.GetUsing() != "":
		return nil, status.Error(codes.InvalidArgument, "Wrong input: qdranttest has no named vectors")
	}
	vec := req.GetQuery().GetNearest().GetDense().GetData()
	if len(vec) == 0 {
		return nil, status.Error(codes.InvalidArgument, "Wrong input: qdranttest answers nearest queries with a dense vector only")
	}
	if len(vec) != c.dim {
		return nil, status.Errorf(codes.InvalidArgument, "Wrong input: Vector dimension error: expected dim: %d, got %d", c.dim, len(vec))
	}
	if _, err := ps.s.queryDelay(req.GetCollectionName()).Wait(ctx); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	limit, offset := 10, int(req.GetOffset())
	if req.Limit != nil {
		limit = int(req.GetLimit())
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	hits, err := c.index.Search(ctx, 0, vec, offset+limit)
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		return nil, status.Errorf(codes.InvalidArgument, "Wrong input: %v", err)
	}
	resp := &qdrant.QueryResponse{}
	for i, h := range hits {
		if i < offset {
			continue
		}
		if req.ScoreThreshold != nil && h.Score < req.GetScoreThreshold() {
			break
		}
		p := c.points[h.ChunkID]
		resp.Result = append(resp.Result, &qdrant.ScoredPoint{Id: p.id, Score: h.Score, Version: 1,
			Payload: selectPayload(req.GetWithPayload(), false, p.payload)})
	}
	if pad := ps.s.padding; pad != nil && len(resp.Result) > 0 {
		first := resp.Result[0]
		payload := make(map[string]*qdrant.Value, len(first.Payload)+1)
		for k, v := range first.Payload {
			payload[k] = v
		}
		payload[PaddingField] = pad
		first.Payload = payload
	}
	return resp, nil
}

func (ps pointsService) Scroll(_ context.Context, req *qdrant.ScrollPoints) (*qdrant.ScrollResponse, error) {
	c, err := ps.s.store.lookup(req.GetCollectionName())
	if err != nil {
		return nil, err
	}
	if req.GetFilter() != nil || req.OrderBy != nil {
		return nil, status.Error(codes.Unimplemented, "qdranttest scrolls without filter or order_by only")
	}
	limit := 10
	if req.Limit != nil {
		limit = int(req.GetLimit())
	}
	c.mu.Lock() // sortedKeys may cache the order
	defer c.mu.Unlock()
	keys := c.sortedKeys()
	c.order = keys
	start := 0
	if req.Offset != nil {
		from, err := pointKey(req.GetOffset())
		if err != nil {
			return nil, err
		}
		start, _ = slices.BinarySearchFunc(keys, from, keyCompare)
	}
	resp := &qdrant.ScrollResponse{}
	end := min(start+limit, len(keys))
	for _, k := range keys[start:end] {
		p := c.points[k]
		resp.Result = append(resp.Result, &qdrant.RetrievedPoint{Id: p.id, Payload: selectPayload(req.GetWithPayload(), true, p.payload)})
	}
	if end < len(keys) {
		resp.NextPageOffset = c.points[keys[end]].id
	}
	return resp, nil
}

func (ps pointsService) Count(_ context.Context, req *qdrant.CountPoints) (*qdrant.CountResponse, error) {
	c, err := ps.s.store.lookup(req.GetCollectionName())
	if err != nil {
		return nil, err
	}
	if req.GetFilter() != nil {
		return nil, status.Error(codes.Unimplemented, "qdranttest counts without filter only")
	}
	return &qdrant.CountResponse{Result: &qdrant.CountResult{Count: uint64(c.len())}}, nil
}
