// cpu_ge in JavaScript: matches when the worker offers at least `min` CPUs; `setup` hands the
// tasks `cpus` (the worker's CPU count, as WEIR_ENV_<NAME>_CPUS).
//
// componentize-qjs (QuickJS) turns this ES module into a component of the `environment` world
// (build.sh). Imports are modules named by their WIT interface; the exported interface is a
// camel-cased object of functions. Throwing a string returns the WIT `result`'s error: the
// worker reports `error(message)`.

import host from "weir:plugin/host@0.1.0";

const MISSING = "cpu_ge: missing config `min` (a whole number of CPUs, e.g. min=4)";
const MALFORMED = "cpu_ge: config `min` must be a whole number of CPUs";
const UNKNOWN = "cpu_ge: unknown config key; cpu_ge takes only `min`";

// config is a list of [key, value] pairs.
function minimum(config) {
  let found = null;
  for (const [key, value] of config) {
    if (key !== "min") throw UNKNOWN;
    // Decimal digits only ("+4", " 4" and "4e0" are refused), at most 4294967295.
    if (!/^[0-9]+$/.test(value) || Number(value) > 4294967295) throw MALFORMED;
    found = Number(value);
  }
  if (found === null) throw MISSING;
  return found;
}

export const condition = {
  evaluate(config) {
    return host.cpuCount() >= minimum(config);
  },
  setup(_config) {
    return [["cpus", String(host.cpuCount())]];
  },
  teardown() {},
};
