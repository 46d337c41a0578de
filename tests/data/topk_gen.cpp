// Ground-truth generator for the torch-CPU top-k emulation in src/num/topk.rs.
//
// torch CPU's topk(largest=True) runs libstdc++ on a vector of (value, index) pairs with the
// comparator "a precedes b iff (isnan(a) && !isnan(b)) || a > b": std::partial_sort when
// k*64 <= n, else std::nth_element at k-1 followed (sorted=True) by std::sort of the first k-1.
// This program calls the real libstdc++ routines on deterministic, tie-heavy rows and writes
// what they leave behind, so the Rust emulation is checked against the library itself.
//
// Build and run (from the crate root):
//   g++ -O2 -std=c++17 -o /tmp/topk_gen tests/data/topk_gen.cpp
//   /tmp/topk_gen > tests/data/topk_cases.json
//
// The "introselect" and "introsort" cases call libstdc++'s internal std::__introselect and
// std::__introsort_loop with a forced depth limit, to exercise the heap fallbacks; those names
// exist in GCC 4.x through at least GCC 14.
//
// Output (JSON): "palette" maps the characters '0'..'8' of each "row" string to values; each
// case has an "op" and the indices the routine left in the queue ("perm", or "set"/"order").

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace {

using Pair = std::pair<float, int64_t>;

bool precedes(const Pair& a, const Pair& b) {
  return (std::isnan(a.first) && !std::isnan(b.first)) || a.first > b.first;
}

const float kInf = std::numeric_limits<float>::infinity();
const float kPalette[9] = {-kInf, -0.5f, 0.0f, 0.25f, 0.5f, 1.0f, 2.0f, kInf,
                           std::numeric_limits<float>::quiet_NaN()};
const char* kPaletteNames[9] = {"-inf", "-0.5", "0", "0.25", "0.5", "1", "2", "inf", "nan"};
constexpr int kNanCode = 8;

struct Rng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint64_t below(uint64_t m) { return next() % m; }
};

// A tie-heavy row as palette codes. Styles: 0 uniform over the 8 non-NaN values, 1 half -inf,
// 2 only two or three distinct values, 3 like 1 with a few NaNs.
std::string make_row(Rng& rng, size_t n, int style) {
  std::string row(n, '0');
  int few[3] = {int(rng.below(8)), int(rng.below(8)), int(rng.below(8))};
  for (size_t i = 0; i < n; ++i) {
    int code;
    switch (style) {
      case 0:
        code = int(rng.below(8));
        break;
      case 1:
        code = rng.below(2) == 0 ? 0 : int(rng.below(8));
        break;
      case 2:
        code = few[rng.below(3)];
        break;
      default:
        code = rng.below(10) == 0 ? kNanCode : (rng.below(2) == 0 ? 0 : int(rng.below(8)));
        break;
    }
    row[i] = char('0' + code);
  }
  return row;
}

std::vector<Pair> make_queue(const std::string& row) {
  std::vector<Pair> q;
  q.reserve(row.size());
  for (size_t i = 0; i < row.size(); ++i) q.emplace_back(kPalette[row[i] - '0'], int64_t(i));
  return q;
}

auto comp_fn = [](const Pair& a, const Pair& b) { return precedes(a, b); };

std::string index_list(const std::vector<Pair>& q, size_t count) {
  std::string s = "[";
  for (size_t i = 0; i < count; ++i) {
    if (i) s += ",";
    s += std::to_string(q[i].second);
  }
  return s + "]";
}

std::string sorted_index_list(const std::vector<Pair>& q, size_t count) {
  std::vector<int64_t> idx;
  for (size_t i = 0; i < count; ++i) idx.push_back(q[i].second);
  std::sort(idx.begin(), idx.end());
  std::string s = "[";
  for (size_t i = 0; i < idx.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(idx[i]);
  }
  return s + "]";
}

bool g_first_case = true;
void emit(const std::string& body) {
  std::printf("%s\n  {%s}", g_first_case ? "" : ",", body.c_str());
  g_first_case = false;
}

// torch CPU topk(largest=True): the selected set and the sorted=True order.
void case_topk(const std::string& row, size_t k) {
  std::vector<Pair> q = make_queue(row);
  size_t n = q.size();
  std::string set, order;
  if (k * 64 <= n) {
    std::partial_sort(q.begin(), q.begin() + k, q.end(), comp_fn);
    set = sorted_index_list(q, k);
    order = index_list(q, k);
  } else {
    std::nth_element(q.begin(), q.begin() + (k - 1), q.end(), comp_fn);
    set = sorted_index_list(q, k);
    std::sort(q.begin(), q.begin() + (k - 1), comp_fn);
    order = index_list(q, k);
  }
  emit("\"op\":\"topk\",\"row\":\"" + row + "\",\"k\":" + std::to_string(k) + ",\"set\":" + set +
       ",\"order\":" + order);
}

void case_nth_element(const std::string& row, size_t nth) {
  std::vector<Pair> q = make_queue(row);
  std::nth_element(q.begin(), q.begin() + nth, q.end(), comp_fn);
  emit("\"op\":\"nth_element\",\"row\":\"" + row + "\",\"nth\":" + std::to_string(nth) +
       ",\"perm\":" + index_list(q, q.size()));
}

void case_introselect(const std::string& row, size_t nth, int depth) {
  std::vector<Pair> q = make_queue(row);
  std::__introselect(q.begin(), q.begin() + nth, q.end(), depth,
                     __gnu_cxx::__ops::__iter_comp_iter(comp_fn));
  emit("\"op\":\"introselect\",\"row\":\"" + row + "\",\"nth\":" + std::to_string(nth) +
       ",\"depth\":" + std::to_string(depth) + ",\"perm\":" + index_list(q, q.size()));
}

// prefix_len: how many leading indices to record (large rows record only the sorted part).
void case_partial_sort(const std::string& row, size_t middle, size_t prefix_len) {
  std::vector<Pair> q = make_queue(row);
  std::partial_sort(q.begin(), q.begin() + middle, q.end(), comp_fn);
  emit("\"op\":\"partial_sort\",\"row\":\"" + row + "\",\"middle\":" + std::to_string(middle) +
       ",\"perm\":" + index_list(q, prefix_len));
}

void case_sort(const std::string& row) {
  std::vector<Pair> q = make_queue(row);
  std::sort(q.begin(), q.end(), comp_fn);
  emit("\"op\":\"sort\",\"row\":\"" + row + "\",\"perm\":" + index_list(q, q.size()));
}

void case_introsort(const std::string& row, int depth) {
  std::vector<Pair> q = make_queue(row);
  auto cmp = __gnu_cxx::__ops::__iter_comp_iter(comp_fn);
  if (!q.empty()) {
    std::__introsort_loop(q.begin(), q.end(), depth, cmp);
    std::__final_insertion_sort(q.begin(), q.end(), cmp);
  }
  emit("\"op\":\"introsort\",\"row\":\"" + row + "\",\"depth\":" + std::to_string(depth) +
       ",\"perm\":" + index_list(q, q.size()));
}

}  // namespace

int main() {
  Rng rng{20260501};
  std::printf("{\n\"generator\": \"tests/data/topk_gen.cpp\",\n\"compiler\": \"g++ %s\",\n",
              __VERSION__);
  std::printf("\"palette\": [");
  for (int i = 0; i < 9; ++i) std::printf("%s\"%s\"", i ? "," : "", kPaletteNames[i]);
  std::printf("],\n\"cases\": [");

  // torch topk on short rows (the nth_element path), every n in 1..40 and several k.
  for (size_t n = 1; n <= 40; ++n) {
    size_t ks[] = {1, 2, 3, 6, n / 2, n - 1, n};
    std::vector<size_t> seen;
    for (size_t k : ks) {
      if (k == 0 || k > n || std::find(seen.begin(), seen.end(), k) != seen.end()) continue;
      seen.push_back(k);
      for (int style = 0; style < 4; ++style) case_topk(make_row(rng, n, style), k);
    }
  }
  // torch topk around and beyond the k*64 <= n switch (partial_sort path).
  struct Big {
    size_t n, k;
  };
  Big bigs[] = {{127, 2}, {128, 2}, {129, 2}, {640, 10}, {639, 10}, {700, 3},
                {1000, 20}, {2048, 8}, {5000, 40}, {300, 1}};
  for (const Big& b : bigs)
    for (int style = 0; style < 4; style += 3) case_topk(make_row(rng, b.n, style), b.k);

  // Raw routines on short rows: full permutations.
  for (int r = 0; r < 120; ++r) {
    size_t n = 1 + rng.below(40);
    int style = int(rng.below(4));
    case_nth_element(make_row(rng, n, style), rng.below(n));
  }
  for (int r = 0; r < 90; ++r) {
    size_t n = 4 + rng.below(37);
    case_introselect(make_row(rng, n, int(rng.below(4))), rng.below(n), int(r % 3));
  }
  for (int r = 0; r < 60; ++r) {
    size_t n = 1 + rng.below(40);
    size_t middle = rng.below(n + 1);
    case_partial_sort(make_row(rng, n, int(rng.below(4))), middle, n);
  }
  for (int r = 0; r < 80; ++r) {
    size_t n = rng.below(41);
    case_sort(make_row(rng, n, int(rng.below(4))));
  }
  for (int r = 0; r < 60; ++r) {
    size_t n = 17 + rng.below(40);
    case_introsort(make_row(rng, n, int(rng.below(4))), int(r % 3));
  }
  // Longer rows for the raw routines (records a prefix for partial_sort).
  case_nth_element(make_row(rng, 300, 1), 150);
  case_introselect(make_row(rng, 300, 0), 37, 1);
  case_partial_sort(make_row(rng, 900, 3), 30, 30);
  case_sort(make_row(rng, 200, 2));
  case_introsort(make_row(rng, 200, 1), 2);

  std::printf("\n]\n}\n");
  return 0;
}
