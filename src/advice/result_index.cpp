#include "advice/result_index.hpp"

#include <algorithm>

namespace sdpa_doctor::advice::detail {

namespace {

Outcome outcome_of(Status s) {
  switch (s) {
  case Status::pass: return Outcome::pass;
  case Status::unsupported: return Outcome::refused;
  case Status::skipped: return Outcome::unmeasured;
  default: return Outcome::failed;
  }
}

// A second probe ran the same variant and case: a failure anywhere outweighs a pass elsewhere,
// because a user may take either probe's path (C++ or Python). A probe that skipped the case
// says nothing about it, so the other probe's measurement stands.
Cell combine(Cell cell, const CaseResult& r) {
  auto rank = [](Outcome o) {
    switch (o) {
    case Outcome::failed: return 3;
    case Outcome::refused: return 2;
    case Outcome::pass: return 1;
    case Outcome::unmeasured: return 0;
    }
    return 3;
  };
  const Outcome o = outcome_of(r.status);
  if (rank(o) > rank(cell.outcome)) cell.outcome = o;
  if (o == Outcome::pass && r.metrics.time_ms)
    cell.time_ms = cell.time_ms ? std::min(*cell.time_ms, *r.metrics.time_ms) : *r.metrics.time_ms;
  return cell;
}

// A probe whose worker could not start at all (not built in, no interpreter) measured nothing:
// its "not built in" is no backend's refusal.
bool worker_started(const Report& report, const CaseResult& r) {
  return std::none_of(report.workers.begin(), report.workers.end(), [&](const WorkerInfo& w) {
    return w.device == r.device && w.probe == r.probe && w.variant == r.variant &&
           w.mode == r.mode && !w.available.empty();
  });
}

// Only these results count towards a recommendation.
bool is_measured(const Report& report, const CaseResult& r, const AdviceOptions& options) {
  return is_torch_probe(r.probe) && (options.dtypes.empty() || options.dtypes.count(r.kase.dtype)) &&
         worker_started(report, r);
}

void add_to_group(std::vector<VariantGroup>& groups, const CaseResult& r) {
  auto it = std::find_if(groups.begin(), groups.end(), [&](const VariantGroup& g) {
    return g.device == r.device && g.variant == r.variant && g.probe == r.probe &&
           g.mode == r.mode;
  });
  if (it == groups.end()) {
    groups.push_back(VariantGroup{r.device, r.variant, r.probe, r.mode, {}, 0});
    it = groups.end() - 1;
  }
  it->by_status[r.status].push_back(&r);
  ++it->total;
}

void add_cell(DeviceIndex& d, const CaseResult& r) {
  if (!d.cases.count(r.case_id)) {
    d.cases[r.case_id] = r.kase;
    d.case_order.push_back(r.case_id);
  }
  d.variants.insert(r.variant);
  auto& cells = d.cells[r.variant];
  auto it = cells.find(r.case_id);
  if (it != cells.end()) {
    it->second = combine(it->second, r);
    return;
  }
  Cell c;
  c.outcome = outcome_of(r.status);
  if (r.status == Status::pass) c.time_ms = r.metrics.time_ms;
  c.chosen = r.backend_chosen;
  cells.emplace(r.case_id, c);
}

void add_result(DeviceIndex& d, const CaseResult& r, const Report& report,
                const AdviceOptions& options) {
  auto& slot = r.probe == Probe::reference ? d.reference[r.variant][r.case_id]
                                           : d.worst[r.variant][r.case_id];
  if (!slot || (slot->status == Status::pass && r.status != Status::pass)) slot = &r;
  if (is_torch_probe(r.probe)) {
    if (d.torch.empty()) d.torch = facts_for(report, r).torch;
    auto v = parse_variant(r.variant);
    if (v && v->has_flag("ck") && is_failure_by_default(r.status)) d.ck_failed = true;
  }
  if (is_measured(report, r, options)) add_cell(d, r);
}

DeviceIndex* find_device(std::vector<DeviceIndex>& devices, const std::string& device) {
  for (DeviceIndex& d : devices) {
    if (d.device == device) return &d;
  }
  return nullptr;
}

} // namespace

bool is_torch_probe(Probe p) { return p == Probe::torch || p == Probe::python; }

bool any_failed(const DeviceIndex& device) {
  for (const auto& [variant, cells] : device.cells)
    for (const auto& [id, cell] : cells)
      if (cell.outcome == Outcome::failed) return true;
  return false;
}

const CaseResult* DeviceIndex::result(const std::string& variant, const std::string& id) const {
  auto v = worst.find(variant);
  if (v == worst.end()) return nullptr;
  auto r = v->second.find(id);
  return r == v->second.end() ? nullptr : r->second;
}

const Cell* DeviceIndex::cell(const std::string& variant, const std::string& id) const {
  auto v = cells.find(variant);
  if (v == cells.end()) return nullptr;
  auto c = v->second.find(id);
  return c == v->second.end() ? nullptr : &c->second;
}

ResultIndex build_result_index(const Report& report, const AdviceOptions& options) {
  ResultIndex index;
  // The device list first, so that the pointers below stay valid.
  auto add_device = [&](const std::string& device) {
    if (find_device(index.devices, device)) return;
    index.devices.emplace_back();
    index.devices.back().device = device;
  };
  for (const std::string& t : report.targets) add_device(t);
  for (const CaseResult& r : report.results) {
    if (is_measured(report, r, options)) add_device(r.device);
  }
  for (const CaseResult& r : report.results) {
    add_to_group(index.groups, r);
    if (r.mode == Mode::compiled) {
      if (!find_device(index.compiled, r.device)) {
        index.compiled.emplace_back();
        index.compiled.back().device = r.device;
        index.compiled.back().mode = Mode::compiled;
      }
      add_result(*find_device(index.compiled, r.device), r, report, options);
    } else if (DeviceIndex* d = find_device(index.devices, r.device)) {
      add_result(*d, r, report, options);
    }
  }
  return index;
}

} // namespace sdpa_doctor::advice::detail
