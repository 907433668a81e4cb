// Linked lists whose `next` pointers live in device memory: each thread walks one list and
// writes its sum. Replay is right only if every node sits at its recorded address.
#include <vector>

#include "check.h"

struct Node {
  int value;
  Node* next;
};

extern "C" __global__ void walk_lists(Node* const* heads, long long* sums, int lists) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= lists) return;
  long long sum = 0;
  for (const Node* node = heads[i]; node != nullptr; node = node->next) sum += node->value;
  sums[i] = sum;
}

int main() {
  const int lists = 64, length = 100, nodes = lists * length;
  Node* dnodes = nullptr;
  Node** dheads = nullptr;
  long long* dsums = nullptr;
  CHECK(cudaMalloc(&dnodes, nodes * sizeof(Node)));
  CHECK(cudaMalloc(&dheads, lists * sizeof(Node*)));
  CHECK(cudaMalloc(&dsums, lists * sizeof(long long)));
  // Interleave the lists across the node array so the pointers jump around.
  std::vector<Node> host(nodes);
  std::vector<Node*> heads(lists);
  std::vector<long long> expected(lists, 0);
  for (int l = 0; l < lists; ++l) {
    for (int k = 0; k < length; ++k) {
      int slot = k * lists + (l * 7 + k) % lists;
      int next_slot = (k + 1) * lists + (l * 7 + k + 1) % lists;
      host[slot].value = l * 1000 + k;
      host[slot].next = k + 1 < length ? dnodes + next_slot : nullptr;
      expected[l] += l * 1000 + k;
      if (k == 0) heads[l] = dnodes + slot;
    }
  }
  CHECK(cudaMemcpy(dnodes, host.data(), nodes * sizeof(Node), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dheads, heads.data(), lists * sizeof(Node*), cudaMemcpyHostToDevice));
  CHECK(cudaMemset(dsums, 0, lists * sizeof(long long)));
  walk_lists<<<1, lists>>>(dheads, dsums, lists);
  CHECK(cudaGetLastError());
  std::vector<long long> sums(lists);
  CHECK(cudaMemcpy(sums.data(), dsums, lists * sizeof(long long), cudaMemcpyDeviceToHost));
  for (int l = 0; l < lists; ++l)
    if (sums[l] != expected[l]) {
      std::fprintf(stderr, "list %d: %lld != %lld\n", l, sums[l], expected[l]);
      return 1;
    }
  std::printf("list_app OK\n");
  return 0;
}
