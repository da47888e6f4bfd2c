// `agentbox-bench-plan DIR`: prints, as a JSON array, the bwrap argv of a
// sandbox rooted in DIR running /bin/true (bench/bare_plan.h), the cold-start
// baseline bench/exec_bench.mjs runs. A program of its own so the product
// binary carries no bench code.
#include "bench/bare_plan.h"

#include <nlohmann/json.hpp>

#include <exception>
#include <iostream>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: agentbox-bench-plan DIR\n";
    return 2;
  }
  try {
    std::cout << nlohmann::json(agentbox::bench::bare_plan_argv(argv[1])).dump() << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "agentbox-bench-plan: " << e.what() << "\n";
    return 1;
  }
}
