#include "loadgen/prompts.h"

#include <array>
#include <random>

namespace mtp::loadgen {
namespace {

constexpr std::array<const char*, 64> kWords = {
    "time",     "year",    "people",   "way",    "day",        "man",    "thing",   "woman",
    "life",     "child",   "world",    "school", "state",      "family", "student", "group",
    "country",  "problem", "hand",     "part",   "place",      "case",   "week",    "company",
    "system",   "program", "question", "work",   "government", "number", "night",   "point",
    "home",     "water",   "room",     "mother", "area",       "money",  "story",   "fact",
    "month",    "lot",     "right",    "study",  "book",       "eye",    "job",     "word",
    "business", "issue",   "side",     "kind",   "head",       "house",  "service", "friend",
    "father",   "power",   "hour",     "game",   "line",       "end",    "member",  "city"};

// A seed per prompt from (seed, id) via SplitMix64's finaliser, so prompts do not depend on order.
uint64_t prompt_seed(uint64_t seed, int64_t id) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(id + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Lengths come from their own stream, so a prompt's words do not depend on the length range.
constexpr uint64_t kLengthSeedSalt = 0x6C656E6774687321ull;

}  // namespace

int prompt_length(uint64_t seed, int64_t id, int lo, int hi) {
  if (hi <= lo) return lo;
  const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
  return lo + static_cast<int>(prompt_seed(seed ^ kLengthSeedSalt, id) % span);
}

std::string synthetic_prompt(uint64_t seed, int64_t id, int words) {
  std::mt19937_64 gen(prompt_seed(seed, id));
  std::string out;
  for (int i = 0; i < words; ++i) {
    if (i > 0) out += ' ';
    out += kWords[gen() % kWords.size()];
  }
  return out;
}

}  // namespace mtp::loadgen
