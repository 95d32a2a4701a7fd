import json, sys

DS = {"type": "prometheus", "uid": "${datasource}"}

def ds_var():
    return {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
            "current": {}, "hide": 0, "refresh": 1, "regex": "", "includeAll": False, "multi": False, "options": []}

def q_var(name, label, query, include_all=True, multi=True):
    return {"name": name, "label": label, "type": "query", "datasource": DS,
            "definition": query, "query": {"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
            "refresh": 2, "includeAll": include_all, "multi": multi, "allValue": ".*",
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]}, "hide": 0, "regex": "", "sort": 1, "options": []}

class Dash:
    def __init__(self, uid, title, tags, desc):
        self.uid, self.title, self.tags, self.desc = uid, title, tags, desc
        self.panels, self.vars = [], [ds_var()]
        self.y = 0; self.x = 0; self.id = 1; self.rowh = 0
    def row(self, title):
        self.newline()
        self.panels.append({"type": "row", "title": title, "id": self.id, "collapsed": False,
                            "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y}, "panels": []})
        self.id += 1; self.y += 1
    def newline(self):
        if self.x:
            self.y += self.rowh; self.x = 0; self.rowh = 0
    def panel(self, title, targets, unit="s", kind="timeseries", w=12, h=8, desc="", thresholds=None):
        if self.x + w > 24:
            self.newline()
        p = {"type": kind, "title": title, "id": self.id, "datasource": DS, "description": desc,
             "gridPos": {"h": h, "w": w, "x": self.x, "y": self.y},
             "targets": [{"datasource": DS, "expr": e, "legendFormat": l, "refId": chr(65 + i), "range": True, "instant": False}
                         for i, (e, l) in enumerate(targets)],
             "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
             "options": {"legend": {"displayMode": "table", "placement": "bottom", "calcs": ["lastNotNull", "max"]},
                         "tooltip": {"mode": "multi"}} if kind == "timeseries" else
                        {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}, "colorMode": "value", "graphMode": "area"}}
        if thresholds:
            p["fieldConfig"]["defaults"]["thresholds"] = {"mode": "absolute", "steps": thresholds}
        self.panels.append(p); self.id += 1
        self.x += w; self.rowh = max(self.rowh, h)
    def json(self):
        return {"uid": self.uid, "title": self.title, "tags": self.tags, "description": self.desc,
                "editable": True, "schemaVersion": 39, "version": 1, "timezone": "browser",
                "time": {"from": "now-1h", "to": "now"}, "refresh": "10s", "graphTooltip": 1,
                "templating": {"list": self.vars}, "annotations": {"list": []}, "links": [], "panels": self.panels}

def quant(metric, sel, by, qs=(0.5, 0.95, 0.99), legend_prefix=""):
    out = []
    for q in qs:
        out.append((f'histogram_quantile({q}, sum by (le{", " + by if by else ""}) (rate({metric}_bucket{{{sel}}}[$__rate_interval])))',
                    f'{legend_prefix}p{int(q*100)}' + (f' {{{{{by}}}}}' if by else '')))
    return out

# ---------------------------------------------------------------- engines
E = 'model_name=~"$model", instance=~"$instance"'
d = Dash("ttft-engines", "ttft / engines (vLLM metrics)", ["ttft", "vllm", "llm"],
         "Serving engines exposing vLLM's metric names: vLLM itself and ttft's simulator (ttft sim serve). TTFT, its queue and prefill parts, KV cache, prefix cache and preemptions.")
d.vars += [q_var("model", "Model", "label_values(vllm:num_requests_running, model_name)"),
           q_var("instance", "Instance", 'label_values(vllm:num_requests_running{model_name=~"$model"}, instance)')]
d.row("Time to first token")
d.panel("TTFT quantiles (server side)", quant("vllm:time_to_first_token_seconds", E, ""), desc="Arrival at the engine to first token.")
d.panel("TTFT p95 by instance", quant("vllm:time_to_first_token_seconds", E, "instance", qs=(0.95,)))
d.panel("Mean TTFT split: queue vs prefill", [
    (f'sum(rate(vllm:request_queue_time_seconds_sum{{{E}}}[$__rate_interval])) / sum(rate(vllm:request_queue_time_seconds_count{{{E}}}[$__rate_interval]))', "queue"),
    (f'sum(rate(vllm:request_prefill_time_seconds_sum{{{E}}}[$__rate_interval])) / sum(rate(vllm:request_prefill_time_seconds_count{{{E}}}[$__rate_interval]))', "prefill"),
    (f'sum(rate(vllm:time_to_first_token_seconds_sum{{{E}}}[$__rate_interval])) / sum(rate(vllm:time_to_first_token_seconds_count{{{E}}}[$__rate_interval]))', "ttft (mean)")],
    desc="TTFT ≈ queue + prefill + (tokenisation, API server). The gap between the TTFT line and queue+prefill is engine overhead outside the scheduler.")
d.panel("Queue time quantiles", quant("vllm:request_queue_time_seconds", E, "", qs=(0.5, 0.95)))
d.row("Load and throughput")
d.panel("Requests running / waiting", [(f'sum by (instance) (vllm:num_requests_running{{{E}}})', "running {{instance}}"),
                                       (f'sum by (instance) (vllm:num_requests_waiting{{{E}}})', "waiting {{instance}}")], unit="short", w=8)
d.panel("Tokens per second", [(f'sum(rate(vllm:prompt_tokens_total{{{E}}}[$__rate_interval]))', "prompt"),
                              (f'sum(rate(vllm:generation_tokens_total{{{E}}}[$__rate_interval]))', "generation")], unit="short", w=8)
d.panel("Finished requests per second", [(f'sum by (finished_reason) (rate(vllm:request_success_total{{{E}}}[$__rate_interval]))', "{{finished_reason}}")], unit="reqps", w=8)
d.panel("Inter-token latency quantiles", quant("vllm:inter_token_latency_seconds", E, "", qs=(0.5, 0.95, 0.99)), w=8)
d.panel("E2E latency quantiles", quant("vllm:e2e_request_latency_seconds", E, "", qs=(0.5, 0.95)), w=8)
d.panel("Time per output token p95", quant("vllm:request_time_per_output_token_seconds", E, "", qs=(0.5, 0.95)), w=8)
d.row("KV cache")
d.panel("KV cache usage", [(f'max by (instance) (vllm:kv_cache_usage_perc{{{E}}})', "{{instance}}")], unit="percentunit", w=8,
        thresholds=[{"color": "green", "value": None}, {"color": "orange", "value": 0.8}, {"color": "red", "value": 0.95}])
d.panel("Prefix cache hit rate (tokens)", [(f'sum(rate(vllm:prefix_cache_hits_total{{{E}}}[$__rate_interval])) / sum(rate(vllm:prefix_cache_queries_total{{{E}}}[$__rate_interval]))', "hit rate")], unit="percentunit", w=8)
d.panel("Preemptions per second", [(f'sum by (instance) (rate(vllm:num_preemptions_total{{{E}}}[$__rate_interval]))', "{{instance}}")], unit="short", w=8,
        desc="Preemptions evict a running request's KV blocks; they show up later as TTFT/ITL spikes.")
engines = d.json()

# ---------------------------------------------------------------- gateway
G = 'backend=~"$backend", slo_class=~"$slo_class"'
d = Dash("ttft-gateway", "ttft / gateway", ["ttft", "gateway", "llm"],
         "ttft gateway: TTFT as clients see it through the gateway, SLO attainment and error-budget burn, routing decisions, predictor accuracy, backend health; and the backends' own engine metrics for the chosen model.")
d.vars += [q_var("backend", "Backend", "label_values(ttft_gateway_in_flight, backend)"),
           q_var("slo_class", "SLO class", "label_values(ttft_gateway_requests_total, slo_class)"),
           q_var("model", "Model (backend engines)", "label_values(vllm:num_requests_running, model_name)")]
d.row("Clients' view")
d.panel("TTFT quantiles through the gateway", quant("ttft_gateway_ttft_seconds", G, "", qs=(0.5, 0.95, 0.99)))
d.panel("TTFT p95 by backend", quant("ttft_gateway_ttft_seconds", G, "backend", qs=(0.95,)))
d.panel("SLO attainment (1 − violations / requests)", [
    (f'1 - (sum by (slo_class) (rate(ttft_gateway_slo_violations_total{{{G}}}[$__rate_interval])) or 0 * sum by (slo_class) (rate(ttft_gateway_requests_total{{{G}}}[$__rate_interval]))) / sum by (slo_class) (rate(ttft_gateway_requests_total{{{G}}}[$__rate_interval]))', "{{slo_class}}")],
    unit="percentunit", w=8)
d.panel("Error-budget burn rate (1h, 99% objective)", [("max by (slo_class) (ttft:gateway_slo_violation_ratio:rate1h) / 0.01", "{{slo_class}}")], unit="short", w=8,
        desc="From the recording rules in deploy/prometheus/ttft-rules.yml. 1 = burning the budget exactly over the SLO period; the fast page fires at 14.4.",
        thresholds=[{"color": "green", "value": None}, {"color": "orange", "value": 6}, {"color": "red", "value": 14.4}])
d.panel("Requests per second by status", [(f'sum by (code) (rate(ttft_gateway_requests_total{{{G}}}[$__rate_interval]))', "{{code}}")], unit="reqps", w=8)
d.panel("ITL quantiles", quant("ttft_gateway_itl_seconds", 'backend=~"$backend"', "", qs=(0.5, 0.99)), w=12)
d.panel("E2E quantiles", quant("ttft_gateway_e2e_seconds", G, "", qs=(0.5, 0.95)), w=12)
d.row("Routing")
d.panel("Decisions per second by backend", [('sum by (backend) (rate(ttft_gateway_decisions_total{backend=~"$backend"}[$__rate_interval]))', "{{backend}}")], unit="ops", w=8)
d.panel("Decisions by reason", [('sum by (policy, reason) (rate(ttft_gateway_decisions_total{backend=~"$backend"}[$__rate_interval]))', "{{policy}} {{reason}}")], unit="ops", w=8)
d.panel("Scheduling time p99", [("histogram_quantile(0.99, sum by (le) (rate(ttft_gateway_scheduling_seconds_bucket[$__rate_interval])))", "p99"),
                                ("histogram_quantile(0.5, sum by (le) (rate(ttft_gateway_scheduling_seconds_bucket[$__rate_interval])))", "p50")], w=8)
d.panel("Predictor error (MAPE)", [('max by (backend, predictor) (ttft_gateway_predictor_mape{backend=~"$backend"})', "{{backend}} {{predictor}}")], unit="percentunit", w=8)
d.panel("Retries and admission actions", [('sum by (reason) (rate(ttft_gateway_retries_total{backend=~"$backend"}[$__rate_interval])) or vector(0)', "retry {{reason}}"),
                                         ("sum by (action) (rate(ttft_gateway_admission_total[$__rate_interval])) or vector(0)", "admission {{action}}")], unit="ops", w=8)
d.panel("Stream errors", [('sum by (backend, reason) (rate(ttft_gateway_stream_errors_total{backend=~"$backend"}[$__rate_interval])) or vector(0)', "{{backend}} {{reason}}")], unit="ops", w=8)
d.row("Backends")
d.panel("In flight", [('sum by (backend) (ttft_gateway_in_flight{backend=~"$backend"})', "{{backend}}")], unit="short", w=6)
d.panel("Queued prompt tokens", [('sum by (backend) (ttft_gateway_queued_prompt_tokens{backend=~"$backend"})', "{{backend}}")], unit="short", w=6)
d.panel("Healthy", [('min by (backend) (ttft_gateway_backend_healthy{backend=~"$backend"})', "{{backend}}")], unit="bool", w=6, kind="stat")
d.panel("Breaker / SLO state", [('max by (backend) (ttft_gateway_breaker_state{backend=~"$backend"})', "breaker {{backend}}"),
                                ('max by (backend) (ttft_gateway_slo_state{backend=~"$backend"})', "slo {{backend}}")], unit="short", w=6)
d.panel("Backend engines: server-side TTFT p95", quant("vllm:time_to_first_token_seconds", 'model_name=~"$model"', "instance", qs=(0.95,)), w=12)
d.panel("Backend engines: waiting requests", [('sum by (instance) (vllm:num_requests_waiting{model_name=~"$model"})', "{{instance}}")], unit="short", w=12)
gateway = d.json()

# ---------------------------------------------------------------- bench
B = 'model=~"$model", target=~"$target"'
d = Dash("ttft-bench", "ttft / bench (live run)", ["ttft", "bench", "llm"],
         "A running 'ttft bench --metrics-addr HOST:PORT': the client-side view, warm-up excluded. Scrape it with the job in deploy/prometheus/prometheus.yml.")
d.vars += [q_var("model", "Model", "label_values(ttft_bench_requests_in_flight, model)" if False else "label_values(ttft_bench_requests_total, model)"),
           q_var("target", "Target", "label_values(ttft_bench_requests_in_flight, target)")]
d.row("Client-side latency")
d.panel("TTFT quantiles (from send)", quant("ttft_bench_time_to_first_token_seconds", B, "", qs=(0.5, 0.9, 0.95, 0.99)))
d.panel("TTFT p95 from intended send vs from actual send", [
    (f"histogram_quantile(0.95, sum by (le) (rate(ttft_bench_time_to_first_token_from_intended_seconds_bucket{{{B}}}[$__rate_interval])))", "from intended (open loop)"),
    (f"histogram_quantile(0.95, sum by (le) (rate(ttft_bench_time_to_first_token_seconds_bucket{{{B}}}[$__rate_interval])))", "from send")],
    desc="A gap means the client fell behind its schedule (coordinated omission would hide it).")
d.panel("Inter-token latency quantiles", quant("ttft_bench_inter_token_latency_seconds", B, "", qs=(0.5, 0.99)), w=8)
d.panel("E2E quantiles", quant("ttft_bench_e2e_request_latency_seconds", B, "", qs=(0.5, 0.95)), w=8)
d.panel("TPOT quantiles", quant("ttft_bench_time_per_output_token_seconds", B, "", qs=(0.5, 0.95)), w=8)
d.row("Load and errors")
d.panel("In flight", [('sum by (target) (ttft_bench_requests_in_flight{target=~"$target"})', "{{target}}")], unit="short", w=6)
d.panel("Requests per second", [(f'sum by (outcome) (rate(ttft_bench_requests_total{{{B}}}[$__rate_interval]))', "{{outcome}}")], unit="reqps", w=6)
d.panel("Error ratio", [(f'(sum(rate(ttft_bench_requests_total{{{B}, outcome="error"}}[$__rate_interval])) or vector(0)) / sum(rate(ttft_bench_requests_total{{{B}}}[$__rate_interval]))', "errors")], unit="percentunit", w=6,
        thresholds=[{"color": "green", "value": None}, {"color": "red", "value": 0.005}])
d.panel("Errors by class", [(f'sum by (class) (rate(ttft_bench_errors_total{{{B}}}[$__rate_interval])) or vector(0)', "{{class}}")], unit="ops", w=6)
d.panel("Tokens per second", [(f'sum(rate(ttft_bench_prompt_tokens_total{{{B}}}[$__rate_interval]))', "prompt"),
                              (f'sum(rate(ttft_bench_generation_tokens_total{{{B}}}[$__rate_interval]))', "generated")], unit="short", w=12)
d.panel("Schedule lag p99 (open loop)", quant("ttft_bench_schedule_lag_seconds", B, "", qs=(0.5, 0.99)), w=12)
bench = d.json()

for name, dash in [("ttft-engines", engines), ("ttft-gateway", gateway), ("ttft-bench", bench)]:
    with open(f"/work/main/deploy/grafana/{name}.json", "w") as f:
        json.dump(dash, f, indent=2, ensure_ascii=False)
        f.write("\n")
print("ok")
