#include "engine/grammar/stack_arena.h"

#include <algorithm>

namespace dq::grammar {

int32_t StackArena::Push(int32_t state, int32_t parent) {
  const uint64_t key = Key(state, parent);
  auto it = index_.find(key);
  if (it != index_.end()) return it->second;
  const int32_t depth = parent < 0 ? 1 : nodes_[static_cast<size_t>(parent)].depth + 1;
  max_depth_ = std::max(max_depth_, depth);
  if (depth > kMaxStackDepth) return -1;
  const int32_t id = static_cast<int32_t>(nodes_.size());
  nodes_.push_back({state, parent, depth});
  visited_.push_back(0);
  index_.emplace(key, id);
  return id;
}

void StackArena::Truncate(size_t mark) {
  if (mark == 0) {
    max_depth_ = 0;
    nodes_.clear();
    visited_.clear();
    index_.clear();
    return;
  }
  for (size_t i = mark; i < nodes_.size(); ++i)
    index_.erase(Key(nodes_[i].state, nodes_[i].parent));
  nodes_.resize(mark);
  visited_.resize(mark);
}

void StackArena::Close(int32_t node, std::vector<int32_t>* out, bool* ended) {
  ++epoch_;
  CloseRec(node, out, ended);
}

void StackArena::CloseRec(int32_t node, std::vector<int32_t>* out, bool* ended) {
  if (node < 0 || visited_[static_cast<size_t>(node)] == epoch_) return;
  visited_[static_cast<size_t>(node)] = epoch_;
  const Node n = nodes_[static_cast<size_t>(node)];
  const GrammarState& st = g_->state(n.state);
  if (!st.bytes.empty()) out->push_back(node);
  for (const CallEdge& c : st.calls) {
    const int32_t ret = Push(c.ret, n.parent);
    if (ret >= 0) CloseRec(Push(g_->rule(c.rule).start, ret), out, ended);
  }
  if (st.final) {
    if (n.parent < 0) {
      *ended = true;
    } else {
      CloseRec(n.parent, out, ended);
    }
  }
}

void StackArena::Step(std::span<const int32_t> in, uint8_t byte, std::vector<int32_t>* out,
                      bool* ended) {
  out->clear();
  ++epoch_;
  for (int32_t node : in) {
    const Node n = nodes_[static_cast<size_t>(node)];
    for (const ByteEdge& e : g_->state(n.state).bytes) {
      if (byte >= e.lo && byte <= e.hi) CloseRec(Push(e.target, n.parent), out, ended);
    }
  }
  std::sort(out->begin(), out->end());
  out->erase(std::unique(out->begin(), out->end()), out->end());
}

}  // namespace dq::grammar
