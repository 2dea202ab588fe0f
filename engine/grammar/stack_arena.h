// The pushdown automaton's stacks, shared and hash-consed: a stack is the id of its top node
// (a grammar state) whose parent is the caller's return position, so equal stacks are equal
// ids and a set of stacks is a sorted vector of ints. Nodes are only appended; Mark/Truncate
// drop the ones a tentative walk added (the token mask's checks).
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/grammar/grammar.h"

namespace dq::grammar {

// Deeper call chains are dropped (a left-recursive $ref must not exhaust memory).
inline constexpr int kMaxStackDepth = 256;

class StackArena {
 public:
  explicit StackArena(const Grammar& grammar) : g_(&grammar) {}

  // The node for `state` on top of `parent` (-1: the bottom); -1 past kMaxStackDepth.
  int32_t Push(int32_t state, int32_t parent);
  int32_t state(int32_t node) const { return nodes_[static_cast<size_t>(node)].state; }
  int32_t parent(int32_t node) const { return nodes_[static_cast<size_t>(node)].parent; }
  // Frames in the stack `node` tops (1: a bottom frame).
  int32_t depth(int32_t node) const { return nodes_[static_cast<size_t>(node)].depth; }

  // The stacks `node` stands for that rest on a byte edge, appended to *out; *ended is set when
  // the bottom frame's rule can end there (for the root rule: the document is complete).
  void Close(int32_t node, std::vector<int32_t>* out, bool* ended);
  // The stacks after `in` (sorted, unique) reads `byte`, in *out (sorted, unique; cleared
  // first); *ended as for Close.
  void Step(std::span<const int32_t> in, uint8_t byte, std::vector<int32_t>* out, bool* ended);

  size_t Mark() const { return nodes_.size(); }
  void Truncate(size_t mark);
  void Clear() { Truncate(0); }
  // The deepest stack pushed since the last Clear (kMaxStackDepth + 1: one was refused).
  int32_t max_depth() const { return max_depth_; }

 private:
  struct Node {
    int32_t state;
    int32_t parent;
    int32_t depth;
  };
  static uint64_t Key(int32_t state, int32_t parent) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(state)) << 32) |
           static_cast<uint32_t>(parent + 1);
  }
  void CloseRec(int32_t node, std::vector<int32_t>* out, bool* ended);

  const Grammar* g_;
  std::vector<Node> nodes_;
  std::vector<uint32_t> visited_;  // per node: the epoch of the last Close that expanded it
  uint32_t epoch_ = 0;
  int32_t max_depth_ = 0;
  std::unordered_map<uint64_t, int32_t> index_;
};

}  // namespace dq::grammar
