//! One run: the cluster written, the simulated agents subscribed, the
//! controller started and its groups received by every agent, the two
//! real agents started and idle for a baseline, then churn — its first
//! half for the real agents' CPU, its second with probes — measured, and
//! the report. Owns the order of the run and the figures;
//! the agents, the world and the server count, this module reads them.

use std::fs::File;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tollgate_fake_api::{kubeconfig_at, FakeApi};

use crate::agents::Agents;
use crate::churn::World;
use crate::cluster;
use crate::process::{cpu_seconds, rss_mib, Process};
use crate::real::{Probe, Probes, RealAgent};
use crate::{step, Args};

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn sorted(mut values: Vec<f64>) -> Vec<f64> {
    values.sort_by(f64::total_cmp);
    values
}

/// mean, p99 and max of `values`.
fn spread(values: &[f64]) -> String {
    let values = sorted(values.to_vec());
    let mean = values.iter().sum::<f64>() / values.len().max(1) as f64;
    format!(
        "mean {mean:.1}, p99 {:.1}, max {:.1}",
        percentile(&values, 99.0),
        values.last().copied().unwrap_or(f64::NAN)
    )
}

fn start_controller(args: &Args, api: &FakeApi) -> Result<Process, String> {
    let kubeconfig = args.work.join("kubeconfig");
    std::fs::write(&kubeconfig, kubeconfig_at(api.address)).map_err(|e| e.to_string())?;
    let log = File::create(args.work.join("controller.log")).map_err(|e| e.to_string())?;
    let child = Command::new(&args.tollgate)
        .arg("controller")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["--identity", "scale-sim", "--listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log)
        .spawn()
        .map_err(|e| format!("{}: {e}", args.tollgate))?;
    Ok(Process(child))
}

pub fn run(args: &Args) -> Result<(), String> {
    let size = args.size;
    let started = Instant::now();
    let api = FakeApi::start("127.0.0.1:0");
    let (wide, local) = cluster::measured_nodes(&size);
    let simulated: Vec<String> = (0..size.nodes)
        .filter(|n| *n != wide && *n != local)
        .map(cluster::node_name)
        .collect();
    let mut agents = Agents::start(&api, simulated);
    let mut world = World::new(size);
    world.populate(&api);
    step("cluster written", started);
    let at = Instant::now();
    agents.refresh(&api);
    step("selections of every Node computed", at);

    let controller = start_controller(args, &api)?;
    let pid = controller.0.id();
    let at = Instant::now();
    let deadline = at + Duration::from_secs(600);
    while !agents.agents.iter().all(|a| a.complete()) {
        if Instant::now() > deadline {
            return Err("the groups did not reach every agent in 600 s".into());
        }
        std::thread::sleep(Duration::from_millis(100));
        agents.refresh(&api);
    }
    step("every agent holds its groups", at);
    let keys: Vec<f64> = agents.agents.iter().map(|a| a.keys() as f64).collect();
    let slices: Vec<f64> = agents.agents.iter().map(|a| a.slices() as f64).collect();
    eprintln!(
        "scale: selections per agent: {}; slices held per agent: {}; controller RSS {:.0} MiB, CPU {:.1} s so far",
        spread(&keys),
        spread(&slices),
        rss_mib(pid),
        cpu_seconds(pid)
    );

    let mut real = Vec::new();
    for (wide_agent, (netns, node)) in [
        (true, (&args.netns[0], wide)),
        (false, (&args.netns[1], local)),
    ] {
        real.push(RealAgent::start(
            &api,
            &size,
            wide_agent,
            netns,
            node,
            &args.tollgate,
            &args.work,
        )?);
    }
    let at = Instant::now();
    while real.iter().any(|a| a.applied() == 0) {
        for agent in &mut real {
            agent.alive()?;
        }
        if at.elapsed() > Duration::from_secs(300) {
            return Err("the real agents applied no ruleset in 300 s".into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    step("the real agents applied their first ruleset", at);
    // Idle baseline: no churn (the agents' timers, the Lease reads). Two
    // whole rounds of the agents' periodic checks (every 10 s, ~10
    // `*-save` processes reading the kernel): a 5 s window held one round
    // or none, and the child processes' baseline was 0 or twice the rate.
    let idle = Duration::from_secs(20);
    let cpu0: Vec<(f64, f64)> = real.iter().map(RealAgent::cpu_split).collect();
    std::thread::sleep(idle);
    // Per second: the agent's own, its child processes'.
    let idle_rate: Vec<(f64, f64)> = real
        .iter()
        .zip(&cpu0)
        .map(|(a, c)| {
            let now = a.cpu_split();
            let per_second = |cpu: f64| cpu / idle.as_secs_f64();
            (per_second(now.0 - c.0), per_second(now.1 - c.1))
        })
        .collect();

    let received_before: Vec<(u64, u64)> = agents.agents.iter().map(|a| a.received()).collect();
    let status_before: Vec<u64> = agents
        .agents
        .iter()
        .map(|a| a.status_events.load(std::sync::atomic::Ordering::Relaxed))
        .collect();
    let sent_before = api.sent();
    let node_events_before = node_events(&api);
    let cpu_before = cpu_seconds(pid);
    let at = Instant::now();
    let side = std::sync::Arc::clone(&agents.side);
    // First half: the real agents' CPU per ruleset applied.
    let half = args.churn / 2;
    let real_cpu0: Vec<(f64, f64)> = real.iter().map(RealAgent::cpu_split).collect();
    let applied0: Vec<usize> = real.iter().map(RealAgent::applied).collect();
    let mut counts = world.churn(&api, &side.tags, args.rates, half, || {
        agents.refresh(&api);
    });
    // Milliseconds per ruleset applied: (the agent's own and its child
    // processes', applied).
    let cpu_per_change: Vec<((f64, f64), usize)> = real
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let applied = a.applied() - applied0[i];
            let now = a.cpu_split();
            let per_change = |now: f64, before: f64, idle: f64| {
                let cpu = now - before - idle * half.as_secs_f64();
                // The baseline is an estimate: a short phase can read below it.
                1e3 * cpu.max(0.0) / applied.max(1) as f64
            };
            (
                (
                    per_change(now.0, real_cpu0[i].0, idle_rate[i].0),
                    per_change(now.1, real_cpu0[i].1, idle_rate[i].1),
                ),
                applied,
            )
        })
        .collect();
    // Second half: probes, one at a time, during the churn.
    let peer_node = (0..size.nodes)
        .find(|n| *n != wide && *n != local)
        .expect("a simulated Node");
    let mut probes = Probes::new(size, peer_node);
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                probes.round(&api, &real);
            }
        });
        let second = world.churn(&api, &side.tags, args.rates, args.churn - half, || {
            agents.refresh(&api);
        });
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        counts.add(&second);
    });
    for agent in &mut real {
        agent.alive()?;
    }
    // The changes of the last moments reach the agents.
    let settle = Instant::now();
    while settle.elapsed() < Duration::from_secs(2) {
        agents.refresh(&api);
        std::thread::sleep(Duration::from_millis(50));
    }
    let seconds = at.elapsed().as_secs_f64();
    step("churn", at);
    let controller_cpu = cpu_seconds(pid) - cpu_before;
    let controller_rss = rss_mib(pid);
    let sent = api.sent();
    let node_events_after = node_events(&api);
    let real_rss: Vec<f64> = real.iter().map(RealAgent::rss_mib).collect();
    let real_parts: Vec<(f64, f64)> = real.iter().map(RealAgent::rss_parts_mib).collect();

    let n = agents.agents.len().max(1) as f64;
    let mut events = Vec::new();
    let mut bytes = Vec::new();
    let mut status = 0;
    for (i, agent) in agents.agents.iter().enumerate() {
        let (e, b) = agent.received();
        events.push((e - received_before[i].0) as f64 / seconds);
        bytes.push((b - received_before[i].1) as f64 / seconds);
        status += agent
            .status_events
            .load(std::sync::atomic::Ordering::Relaxed)
            - status_before[i];
    }
    let idle_status = status as f64 / n;
    let tags = agents.side.tags.lock().unwrap();
    let pairs = sorted(tags.samples.clone());
    let last = sorted(tags.last_agent.values().copied().collect());
    println!(
        "churn: {seconds:.0} s: {} creates, {} deletes, {} address changes, {} label changes, {} status writes, {} Namespace label changes, {} policy edits, {} Node status reports",
        counts.creates, counts.deletes, counts.addresses, counts.labels, counts.statuses, counts.namespaces, counts.policies, counts.node_reports
    );
    println!(
        "simulated agents: {}; events/s received per agent: {}; bytes/s: {}",
        agents.agents.len(),
        spread(&events),
        spread(&bytes)
    );
    println!(
        "API server sent: {:.0} events/s, {:.0} bytes/s (to every watch and simulated agent)",
        (sent.0 - sent_before.0) as f64 / seconds,
        (sent.1 - sent_before.1) as f64 / seconds
    );
    println!(
        "controller: RSS {controller_rss:.0} MiB, CPU {controller_cpu:.1} s over the churn ({:.0} %)",
        100.0 * controller_cpu / seconds
    );
    println!(
        "Pod change (fresh address) until a simulated agent is handed it: {} (change, agent) pairs, p50 {:.0} ms, p99 {:.0} ms; cluster-wide (the last agent of each of {} changes): p99 {:.0} ms, max {:.0} ms",
        pairs.len(),
        percentile(&pairs, 50.0),
        percentile(&pairs, 99.0),
        last.len(),
        percentile(&last, 99.0),
        last.last().copied().unwrap_or(f64::NAN)
    );
    println!(
        "status writes that changed no address or label: {} written, {idle_status:.2} events per simulated agent over the churn (its own Pods' writes, through its spec.nodeName watch; a group slice event is not attributed to a write)",
        counts.statuses
    );
    let report = serde_json::to_vec(&cluster::node_report(0, 1)).map_or(0, |v| v.len());
    let sent: Vec<String> = node_events_after
        .iter()
        .map(|(fields, (watches, after))| {
            let before = node_events_before.get(fields).map_or(0, |(_, e)| *e);
            let fields = if fields.is_empty() {
                "every Node"
            } else {
                fields
            };
            format!(
                "{:.2}/s to {watches} watch(es) of {fields}",
                (after - before) as f64 / seconds
            )
        })
        .collect();
    println!(
        "Node status reports: {:.1}/s ({report} bytes each here; a real Node's status is larger); Node events sent (the controller and the real agents watch Nodes, the simulated agents none): {}",
        counts.node_reports as f64 / seconds,
        sent.join(", "),
    );
    println!(
        "simulation process RSS (fake API server and every simulated agent): {:.0} MiB; span per Pod shape: {:.1} s in all",
        rss_mib(std::process::id()),
        agents.span_seconds
    );
    let applied = sorted(probes.samples.iter().map(|(_, _, ms)| *ms).collect());
    for (i, agent) in real.iter().enumerate() {
        let of = |kind: Option<Probe>| {
            sorted(
                probes
                    .samples
                    .iter()
                    .filter(|(name, probe, _)| {
                        *name == agent.name && kind.is_none_or(|kind| kind == *probe)
                    })
                    .map(|(_, _, ms)| *ms)
                    .collect(),
            )
        };
        let own = of(None);
        let by_kind: Vec<String> = [
            (Probe::Address, "a fresh address"),
            (Probe::PolicyEdit, "a policy edit"),
        ]
        .into_iter()
        .map(|(kind, what)| (of(Some(kind)), what))
        .filter(|(samples, _)| !samples.is_empty())
        .map(|(samples, what)| {
            format!(
                "{what}: {}, p50 {:.0} ms, p99 {:.0} ms",
                samples.len(),
                percentile(&samples, 50.0),
                percentile(&samples, 99.0)
            )
        })
        .collect();
        println!(
            "real agent {} (node-{}): RSS {:.1} MiB after the churn ({:.1} its own, {:.1} pages of its executable and libraries, shared); CPU {:.2} ms per ruleset applied (the agent {:.2}, its iptables/ipset processes {:.2}; {} applied in the first {:.0} s of churn, idle baseline {:.1} % subtracted{}; {:.1} ms of CPU a second of that churn, reloads that applied no ruleset included); probes applied: {}, p50 {:.0} ms, p99 {:.0} ms ({})",
            agent.name,
            if i == 0 { wide } else { local },
            real_rss[i],
            real_parts[i].0,
            real_parts[i].1,
            cpu_per_change[i].0 .0 + cpu_per_change[i].0 .1,
            cpu_per_change[i].0 .0,
            cpu_per_change[i].0 .1,
            cpu_per_change[i].1,
            half.as_secs_f64(),
            100.0 * (idle_rate[i].0 + idle_rate[i].1),
            if cpu_per_change[i].1 == 0 {
                "; none applied: not in the summary"
            } else {
                ""
            },
            (cpu_per_change[i].0 .0 + cpu_per_change[i].0 .1) * cpu_per_change[i].1.max(1) as f64
                / half.as_secs_f64(),
            own.len(),
            percentile(&own, 50.0),
            percentile(&own, 99.0),
            by_kind.join("; "),
        );
    }
    println!(
        "probes (one change at a time: a remote Pod's fresh address, a policy edit and its revert) until the real agent's ruleset in force decides by it: {} applied, {} not within 30 s",
        applied.len(),
        probes.missed
    );
    drop(real);
    drop(controller);
    println!(
        "scale nodes={} pods={} agent_rss_mib={:.1} agent_rss_local_mib={:.1} p99_apply_ms={:.0} cluster_apply_ms={:.0} cpu_per_change_ms={:.2} idle_status_events_per_agent={idle_status:.2}",
        size.nodes,
        size.pods,
        real_rss[0],
        real_rss[1],
        percentile(&applied, 99.0),
        percentile(&last, 99.0),
        cpu_per_change
            .iter()
            .filter(|c| c.1 > 0)
            .map(|c| c.0 .0 + c.0 .1)
            .fold(0.0, f64::max),
    );
    Ok(())
}

/// Node watches and the events sent on them, by field selector (empty:
/// every Node).
fn node_events(api: &FakeApi) -> std::collections::BTreeMap<String, (usize, u64)> {
    let mut by = std::collections::BTreeMap::new();
    for watch in api.watches() {
        if watch.path == "/api/v1/nodes" {
            let (watches, events) = by.entry(watch.fields.clone()).or_insert((0, 0));
            *watches += 1;
            *events += watch.events;
        }
    }
    by
}
