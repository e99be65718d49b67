//! Kernel datapath: owns the `TOLLGATE-*` chains of the filter table (IPv4
//! and IPv6), one jump into each from INPUT, FORWARD and OUTPUT (and, on a
//! Docker host, a second jump into `TOLLGATE-FORWARD` from Docker's
//! `DOCKER-USER`; see [`diff`] and `docs/guide/docker.md`), the chains of
//! the mangle table that decide forwarded connections, jumped to from its
//! FORWARD and POSTROUTING ([`plan`] says why there), the
//! anti-spoofing chains of the raw table and of ebtables' nat table with
//! their jumps from `PREROUTING` ([`antispoof`]), and the `tollgate-*`
//! ipsets. It must never modify a rule, chain or set it does not own
//! (Docker's chains included: it never creates, flushes or reorders them),
//! nor an entry of a learned (FQDN) set: those belong to the DNS worker.
//! The desired state is planned by pure functions ([`plan`]), compared
//! with what is installed ([`state`], [`diff`]), and only the difference
//! is written, in one batch per table ([`kernel`]), in the
//! order [`transition`] explains: a failing write leaves the previous or
//! the next ruleset enforced, and is retried with backoff ([`retry`]).
//!
//! # Marks
//!
//! The mark and connmark codes are those of [`crate::marks`]: a worker
//! answers a queued packet with a mark and `NF_REPEAT`, and the rules
//! below save it into the connmark and act on it.
//!
//! The L7 queues (default: two from the first queue after the connection
//! queues that the DNS queue does not take, 103 and 104 here) receive
//! only the client's FIN, RST and URG (so the worker forgets closed connections)
//! and segments that may carry payload: the owned chain `TOLLGATE-L7`
//! returns other segments whose IP length equals the IP plus TCP header length
//! (`u32` tests for every TCP data offset, IPv4 without options and IPv6
//! without extension headers; anything else is queued, so no payload ever
//! bypasses it), and server→client packets of *L7 active* connections are
//! never queued. With several L7 queues every rule that queues to L7 jumps
//! to `TOLLGATE-L7-QUEUE`, which picks the queue of the packet's
//! connection from its client port ([`plan::l7_queue_of`]: bits 1–6 of
//! the TCP source port in conntrack's ORIGINAL direction, of the
//! destination port in the REPLY direction, read by `u32`), so both
//! directions of a connection reach one worker and two connections
//! between the same two addresses usually reach different ones; what the
//! tests cannot read (an IPv6 segment with more than two extension
//! headers, or others than hop-by-hop, routing and destination options)
//! goes to the first L7 queue. A single L7 queue is queued to directly
//! (`-j NFQUEUE --queue-num N`).
//!
//! # Kernel state
//!
//! With the default configuration (two queues, fail-closed, all
//! interfaces), a rule applying to the Node's ingress and one enforced
//! endpoint `10.0.0.5`, `iptables-save -t mangle` and `iptables-save -t filter`
//! show:
//!
//! ```text
//! *mangle
//! :PREROUTING ACCEPT [0:0]
//! :INPUT ACCEPT [0:0]
//! :FORWARD ACCEPT [0:0]
//! :OUTPUT ACCEPT [0:0]
//! :POSTROUTING ACCEPT [0:0]
//! :TOLLGATE-FORWARD - [0:0]
//! :TOLLGATE-L7 - [0:0]
//! :TOLLGATE-L7-QUEUE - [0:0]
//! :TOLLGATE-POSTROUTING - [0:0]
//! -A FORWARD -j TOLLGATE-FORWARD
//! -A POSTROUTING -m mark --mark 0x200000/0xf00000 -j TOLLGATE-POSTROUTING
//! -A TOLLGATE-FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -m connmark --mark 0x100000/0xf00000 -j ACCEPT
//! -A TOLLGATE-FORWARD -p tcp -m mark --mark 0x0/0xf00000 -m connmark --mark 0x500000/0xf00000 -m conntrack --ctdir ORIGINAL -j TOLLGATE-L7
//! -A TOLLGATE-FORWARD -m mark --mark 0x0/0xf00000 -m conntrack --ctstate RELATED,ESTABLISHED -m connmark --mark 0x500000/0xf00000 -j ACCEPT
//! -A TOLLGATE-FORWARD -m mark --mark 0x100000/0xf00000 -j CONNMARK --save-mark --nfmask 0xf00000 --ctmask 0xf00000
//! -A TOLLGATE-FORWARD -m mark --mark 0x100000/0xf00000 -j ACCEPT
//! -A TOLLGATE-FORWARD -m mark --mark 0x400000/0xf00000 -j CONNMARK --save-mark --nfmask 0xf00000 --ctmask 0xf00000
//! -A TOLLGATE-FORWARD -m mark --mark 0x400000/0xf00000 -j ACCEPT
//! -A TOLLGATE-FORWARD -m mark --mark 0x500000/0xf00000 -j CONNMARK --save-mark --nfmask 0xf00000 --ctmask 0xf00000
//! -A TOLLGATE-FORWARD -m mark --mark 0x500000/0xf00000 -j ACCEPT
//! -A TOLLGATE-FORWARD -m mark --mark 0x600000/0xf00000 -j CONNMARK --save-mark --nfmask 0xf00000 --ctmask 0xf00000
//! -A TOLLGATE-FORWARD -m mark --mark 0x600000/0xf00000 -j DROP
//! -A TOLLGATE-FORWARD -m mark --mark 0x200000/0xf00000 -j ACCEPT
//! -A TOLLGATE-FORWARD -m connmark --mark 0x600000/0xf00000 -j DROP
//! -A TOLLGATE-FORWARD -p tcp -m connmark --mark 0x400000/0xf00000 -j TOLLGATE-L7-QUEUE
//! -A TOLLGATE-FORWARD -p tcp -m connmark --mark 0x500000/0xf00000 -m conntrack --ctdir ORIGINAL -j TOLLGATE-L7
//! -A TOLLGATE-FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -m connmark --mark 0x500000/0xf00000 -j ACCEPT
//! -A TOLLGATE-FORWARD -p icmp -m set --match-set tollgate-endpoints-v4 src -m conntrack --ctstate INVALID,UNTRACKED -j DROP
//! -A TOLLGATE-FORWARD -p icmp -m set --match-set tollgate-endpoints-v4 dst -m conntrack --ctstate INVALID,UNTRACKED -j DROP
//! -A TOLLGATE-FORWARD -m set --match-set tollgate-endpoints-v4 src -m conntrack --ctstate NEW -j NFQUEUE --queue-balance 100:101
//! -A TOLLGATE-FORWARD ! -p icmp -m set --match-set tollgate-endpoints-v4 src -m conntrack --ctstate INVALID -j NFQUEUE --queue-balance 100:101
//! -A TOLLGATE-FORWARD -m set --match-set tollgate-endpoints-v4 dst -m conntrack --ctstate NEW -j NFQUEUE --queue-balance 100:101
//! -A TOLLGATE-FORWARD ! -p icmp -m set --match-set tollgate-endpoints-v4 dst -m conntrack --ctstate INVALID -j NFQUEUE --queue-balance 100:101
//! -A TOLLGATE-L7 -m length --length 81:65535 -j TOLLGATE-L7-QUEUE
//! -A TOLLGATE-L7 -p tcp -m tcp --tcp-flags FIN FIN -j TOLLGATE-L7-QUEUE
//! -A TOLLGATE-L7 -p tcp -m tcp --tcp-flags RST RST -j TOLLGATE-L7-QUEUE
//! -A TOLLGATE-L7 -p tcp -m tcp --tcp-flags URG URG -j TOLLGATE-L7-QUEUE
//! -A TOLLGATE-L7 -m u32 --u32 "0x0>>0x18=0x45&&0x0&0xffff=0x28&&0x20>>0x1c=0x5" -j RETURN
//! -A TOLLGATE-L7 -m u32 --u32 "0x0>>0x18=0x45&&0x0&0xffff=0x2c&&0x20>>0x1c=0x6" -j RETURN
//! -A TOLLGATE-L7 -m u32 --u32 "0x0>>0x18=0x45&&0x0&0xffff=0x30&&0x20>>0x1c=0x7" -j RETURN
//! -A TOLLGATE-L7 -m u32 --u32 "0x0>>0x18=0x45&&0x0&0xffff=0x34&&0x20>>0x1c=0x8" -j RETURN
//! -A TOLLGATE-L7 -m u32 --u32 "0x0>>0x18=0x45&&0x0&0xffff=0x38&&0x20>>0x1c=0x9" -j RETURN
//! -A TOLLGATE-L7 -m u32 --u32 "0x0>>0x18=0x45&&0x0&0xffff=0x3c&&0x20>>0x1c=0xa" -j RETURN
//! -A TOLLGATE-L7 -m u32 --u32 "0x0>>0x18=0x45&&0x0&0xffff=0x40&&0x20>>0x1c=0xb" -j RETURN
//! -A TOLLGATE-L7 -m u32 --u32 "0x0>>0x18=0x45&&0x0&0xffff=0x44&&0x20>>0x1c=0xc" -j RETURN
//! -A TOLLGATE-L7 -m u32 --u32 "0x0>>0x18=0x45&&0x0&0xffff=0x48&&0x20>>0x1c=0xd" -j RETURN
//! -A TOLLGATE-L7 -m u32 --u32 "0x0>>0x18=0x45&&0x0&0xffff=0x4c&&0x20>>0x1c=0xe" -j RETURN
//! -A TOLLGATE-L7 -m u32 --u32 "0x0>>0x18=0x45&&0x0&0xffff=0x50&&0x20>>0x1c=0xf" -j RETURN
//! -A TOLLGATE-L7 -j TOLLGATE-L7-QUEUE
//! -A TOLLGATE-L7-QUEUE -m conntrack --ctdir ORIGINAL -m u32 --u32 "0x0>>0x16&0x3c@0x0>>0x11&0x1=0x1" -j NFQUEUE --queue-num 104
//! -A TOLLGATE-L7-QUEUE -m conntrack --ctdir REPLY -m u32 --u32 "0x0>>0x16&0x3c@0x0>>0x1&0x1=0x1" -j NFQUEUE --queue-num 104
//! -A TOLLGATE-L7-QUEUE -j NFQUEUE --queue-num 103
//! -A TOLLGATE-POSTROUTING -m mark --mark 0x200000/0xf00000 -j DROP
//! COMMIT
//! *filter
//! :INPUT ACCEPT [0:0]
//! :FORWARD ACCEPT [0:0]
//! :OUTPUT ACCEPT [0:0]
//! :TOLLGATE-FORWARD - [0:0]
//! :TOLLGATE-INPUT - [0:0]
//! :TOLLGATE-L7 - [0:0]
//! :TOLLGATE-L7-QUEUE - [0:0]
//! :TOLLGATE-OUTPUT - [0:0]
//! -A INPUT -j TOLLGATE-INPUT
//! -A FORWARD -j TOLLGATE-FORWARD
//! -A OUTPUT -j TOLLGATE-OUTPUT
//! -A TOLLGATE-FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -m connmark --mark 0x100000/0xf00000 -j ACCEPT
//! -A TOLLGATE-FORWARD -m mark --mark 0x0/0xf00000 -m conntrack --ctstate RELATED,ESTABLISHED -m connmark --mark 0x500000/0xf00000 -j ACCEPT
//! -A TOLLGATE-FORWARD -m mark --mark 0x100000/0xf00000 -j ACCEPT
//! -A TOLLGATE-FORWARD -m mark --mark 0x400000/0xf00000 -j ACCEPT
//! -A TOLLGATE-FORWARD -m mark --mark 0x500000/0xf00000 -j ACCEPT
//! -A TOLLGATE-FORWARD -p tcp -m mark --mark 0x200000/0xf00000 -j REJECT --reject-with tcp-reset
//! -A TOLLGATE-FORWARD -m mark --mark 0x200000/0xf00000 -j REJECT --reject-with icmp-admin-prohibited
//! -A TOLLGATE-FORWARD -m connmark --mark 0x400000/0xf00000 -j ACCEPT
//! -A TOLLGATE-FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -m connmark --mark 0x500000/0xf00000 -j ACCEPT
//! -A TOLLGATE-INPUT -i lo -j ACCEPT
//! -A TOLLGATE-INPUT -m conntrack --ctstate RELATED,ESTABLISHED -m connmark --mark 0x100000/0xf00000 -j ACCEPT
//! -A TOLLGATE-INPUT -p tcp -m mark --mark 0x0/0xf00000 -m connmark --mark 0x500000/0xf00000 -m conntrack --ctdir ORIGINAL -j TOLLGATE-L7
//! -A TOLLGATE-INPUT -m mark --mark 0x0/0xf00000 -m conntrack --ctstate RELATED,ESTABLISHED -m connmark --mark 0x500000/0xf00000 -j ACCEPT
//! -A TOLLGATE-INPUT -m mark --mark 0x100000/0xf00000 -j CONNMARK --save-mark --nfmask 0xf00000 --ctmask 0xf00000
//! -A TOLLGATE-INPUT -m mark --mark 0x100000/0xf00000 -j ACCEPT
//! -A TOLLGATE-INPUT -m mark --mark 0x400000/0xf00000 -j CONNMARK --save-mark --nfmask 0xf00000 --ctmask 0xf00000
//! -A TOLLGATE-INPUT -m mark --mark 0x400000/0xf00000 -j ACCEPT
//! -A TOLLGATE-INPUT -m mark --mark 0x500000/0xf00000 -j CONNMARK --save-mark --nfmask 0xf00000 --ctmask 0xf00000
//! -A TOLLGATE-INPUT -m mark --mark 0x500000/0xf00000 -j ACCEPT
//! -A TOLLGATE-INPUT -m mark --mark 0x600000/0xf00000 -j CONNMARK --save-mark --nfmask 0xf00000 --ctmask 0xf00000
//! -A TOLLGATE-INPUT -m mark --mark 0x600000/0xf00000 -j DROP
//! -A TOLLGATE-INPUT -p tcp -m mark --mark 0x200000/0xf00000 -j REJECT --reject-with tcp-reset
//! -A TOLLGATE-INPUT -m mark --mark 0x200000/0xf00000 -j REJECT --reject-with icmp-admin-prohibited
//! -A TOLLGATE-INPUT -m connmark --mark 0x600000/0xf00000 -j DROP
//! -A TOLLGATE-INPUT -p tcp -m connmark --mark 0x400000/0xf00000 -j TOLLGATE-L7-QUEUE
//! -A TOLLGATE-INPUT -p tcp -m connmark --mark 0x500000/0xf00000 -m conntrack --ctdir ORIGINAL -j TOLLGATE-L7
//! -A TOLLGATE-INPUT -m conntrack --ctstate RELATED,ESTABLISHED -m connmark --mark 0x500000/0xf00000 -j ACCEPT
//! -A TOLLGATE-INPUT -p icmp -m conntrack --ctstate INVALID,UNTRACKED -j DROP
//! -A TOLLGATE-INPUT -m conntrack --ctstate NEW -j NFQUEUE --queue-balance 100:101
//! -A TOLLGATE-INPUT ! -p icmp -m conntrack --ctstate INVALID -j NFQUEUE --queue-balance 100:101
//! -A TOLLGATE-L7 -m length --length 81:65535 -j TOLLGATE-L7-QUEUE
//! -A TOLLGATE-L7 -p tcp -m tcp --tcp-flags FIN FIN -j TOLLGATE-L7-QUEUE
//! -A TOLLGATE-L7 -p tcp -m tcp --tcp-flags RST RST -j TOLLGATE-L7-QUEUE
//! -A TOLLGATE-L7 -p tcp -m tcp --tcp-flags URG URG -j TOLLGATE-L7-QUEUE
//! -A TOLLGATE-L7 -m u32 --u32 "0x0>>0x18=0x45&&0x0&0xffff=0x28&&0x20>>0x1c=0x5" -j RETURN
//! -A TOLLGATE-L7 -m u32 --u32 "0x0>>0x18=0x45&&0x0&0xffff=0x2c&&0x20>>0x1c=0x6" -j RETURN
//! -A TOLLGATE-L7 -m u32 --u32 "0x0>>0x18=0x45&&0x0&0xffff=0x30&&0x20>>0x1c=0x7" -j RETURN
//! -A TOLLGATE-L7 -m u32 --u32 "0x0>>0x18=0x45&&0x0&0xffff=0x34&&0x20>>0x1c=0x8" -j RETURN
//! -A TOLLGATE-L7 -m u32 --u32 "0x0>>0x18=0x45&&0x0&0xffff=0x38&&0x20>>0x1c=0x9" -j RETURN
//! -A TOLLGATE-L7 -m u32 --u32 "0x0>>0x18=0x45&&0x0&0xffff=0x3c&&0x20>>0x1c=0xa" -j RETURN
//! -A TOLLGATE-L7 -m u32 --u32 "0x0>>0x18=0x45&&0x0&0xffff=0x40&&0x20>>0x1c=0xb" -j RETURN
//! -A TOLLGATE-L7 -m u32 --u32 "0x0>>0x18=0x45&&0x0&0xffff=0x44&&0x20>>0x1c=0xc" -j RETURN
//! -A TOLLGATE-L7 -m u32 --u32 "0x0>>0x18=0x45&&0x0&0xffff=0x48&&0x20>>0x1c=0xd" -j RETURN
//! -A TOLLGATE-L7 -m u32 --u32 "0x0>>0x18=0x45&&0x0&0xffff=0x4c&&0x20>>0x1c=0xe" -j RETURN
//! -A TOLLGATE-L7 -m u32 --u32 "0x0>>0x18=0x45&&0x0&0xffff=0x50&&0x20>>0x1c=0xf" -j RETURN
//! -A TOLLGATE-L7 -j TOLLGATE-L7-QUEUE
//! -A TOLLGATE-L7-QUEUE -m conntrack --ctdir ORIGINAL -m u32 --u32 "0x0>>0x16&0x3c@0x0>>0x11&0x1=0x1" -j NFQUEUE --queue-num 104
//! -A TOLLGATE-L7-QUEUE -m conntrack --ctdir REPLY -m u32 --u32 "0x0>>0x16&0x3c@0x0>>0x1&0x1=0x1" -j NFQUEUE --queue-num 104
//! -A TOLLGATE-L7-QUEUE -j NFQUEUE --queue-num 103
//! -A TOLLGATE-OUTPUT -o lo -j ACCEPT
//! -A TOLLGATE-OUTPUT -m conntrack --ctstate RELATED,ESTABLISHED -m connmark --mark 0x100000/0xf00000 -j ACCEPT
//! -A TOLLGATE-OUTPUT -p tcp -m mark --mark 0x0/0xf00000 -m connmark --mark 0x500000/0xf00000 -m conntrack --ctdir ORIGINAL -j TOLLGATE-L7
//! -A TOLLGATE-OUTPUT -m mark --mark 0x0/0xf00000 -m conntrack --ctstate RELATED,ESTABLISHED -m connmark --mark 0x500000/0xf00000 -j ACCEPT
//! -A TOLLGATE-OUTPUT -m mark --mark 0x100000/0xf00000 -j CONNMARK --save-mark --nfmask 0xf00000 --ctmask 0xf00000
//! -A TOLLGATE-OUTPUT -m mark --mark 0x100000/0xf00000 -j ACCEPT
//! -A TOLLGATE-OUTPUT -m mark --mark 0x400000/0xf00000 -j CONNMARK --save-mark --nfmask 0xf00000 --ctmask 0xf00000
//! -A TOLLGATE-OUTPUT -m mark --mark 0x400000/0xf00000 -j ACCEPT
//! -A TOLLGATE-OUTPUT -m mark --mark 0x500000/0xf00000 -j CONNMARK --save-mark --nfmask 0xf00000 --ctmask 0xf00000
//! -A TOLLGATE-OUTPUT -m mark --mark 0x500000/0xf00000 -j ACCEPT
//! -A TOLLGATE-OUTPUT -m mark --mark 0x600000/0xf00000 -j CONNMARK --save-mark --nfmask 0xf00000 --ctmask 0xf00000
//! -A TOLLGATE-OUTPUT -m mark --mark 0x600000/0xf00000 -j DROP
//! -A TOLLGATE-OUTPUT -p tcp -m mark --mark 0x200000/0xf00000 -j REJECT --reject-with tcp-reset
//! -A TOLLGATE-OUTPUT -m mark --mark 0x200000/0xf00000 -j REJECT --reject-with icmp-admin-prohibited
//! -A TOLLGATE-OUTPUT -m connmark --mark 0x600000/0xf00000 -j DROP
//! -A TOLLGATE-OUTPUT -p tcp -m connmark --mark 0x400000/0xf00000 -j TOLLGATE-L7-QUEUE
//! -A TOLLGATE-OUTPUT -p tcp -m connmark --mark 0x500000/0xf00000 -m conntrack --ctdir ORIGINAL -j TOLLGATE-L7
//! -A TOLLGATE-OUTPUT -m conntrack --ctstate RELATED,ESTABLISHED -m connmark --mark 0x500000/0xf00000 -j ACCEPT
//! -A TOLLGATE-OUTPUT -p icmp -m set --match-set tollgate-endpoints-v4 src -m conntrack --ctstate INVALID,UNTRACKED -j DROP
//! -A TOLLGATE-OUTPUT -p icmp -m set --match-set tollgate-endpoints-v4 dst -m conntrack --ctstate INVALID,UNTRACKED -j DROP
//! -A TOLLGATE-OUTPUT -m set --match-set tollgate-endpoints-v4 src -m conntrack --ctstate NEW -j NFQUEUE --queue-balance 100:101
//! -A TOLLGATE-OUTPUT ! -p icmp -m set --match-set tollgate-endpoints-v4 src -m conntrack --ctstate INVALID -j NFQUEUE --queue-balance 100:101
//! -A TOLLGATE-OUTPUT -m set --match-set tollgate-endpoints-v4 dst -m conntrack --ctstate NEW -j NFQUEUE --queue-balance 100:101
//! -A TOLLGATE-OUTPUT ! -p icmp -m set --match-set tollgate-endpoints-v4 dst -m conntrack --ctstate INVALID -j NFQUEUE --queue-balance 100:101
//! COMMIT
//! ```
//!
//! and `ipset save` shows `create tollgate-endpoints-v4 hash:ip family inet
//! …`, `add tollgate-endpoints-v4 10.0.0.5` and an empty
//! `tollgate-endpoints-v6` (`family inet6`). `ip6tables-save` is the same
//! with `tollgate-endpoints-v6`, `icmp6-adm-prohibited`, and ICMPv6
//! neighbour discovery (types 133–137) with hop limit 255 accepted on INPUT
//! and OUTPUT after the connmark rule (returned on FORWARD), MLD (130–132,
//! 143) from `fe80::/10` returned, both ahead of the drops of ICMPv6
//! without a connection, IPv6 `TOLLGATE-L7` tests
//! `0x4>>0x8&0xff=0x6&&0x4>>0x10=<TCP header length>&&0x34>>0x1c=<data
//! offset>`. IPv6 `TOLLGATE-L7-QUEUE` has three rules per IPv4 rule, one
//! for each header layout `u32` follows to the ports: TCP right after the
//! fixed header (`0x4>>0x8&0xff=0x6&&0x28>>0x11&0x1=0x1` in the ORIGINAL
//! direction), after one extension header
//! (`0x4>>0x8&0xff=0x0,0x2b,0x3c&&0x28>>0x18=0x6&&0x28>>0xd&0x7f8@0x30>>0x11&0x1=0x1`),
//! after two
//! (`0x4>>0x8&0xff=0x0,0x2b,0x3c&&0x28>>0x18=0x0,0x2b,0x3c&&0x28>>0xd&0x7f8@0x30>>0x18=0x6&&0x28>>0xd&0x7f8@0x30>>0xd&0x7f8@0x38>>0x11&0x1=0x1`);
//! the REPLY rules shift by `0x1` instead of `0x11`. With a number of L7
//! queues that is not a power of two, a `TOLLGATE-L7-QUEUE` test reads the
//! whole 6-bit bucket (`&0x3f`) and lists up to ten buckets of one queue.
//! The first rule after loopback accepts the packets of connections a
//! worker or the cache allowed (most packets), so they meet one rule. With
//! FQDN selectors in the ruleset, DNS must still reach the DNS queue: that
//! first rule becomes two, for TCP and UDP on any port but 53, and every
//! owned chain of both families also gets, right after the L7 rules, the
//! DNS rules, then the same connmark shortcut for the rest (queue 102 =
//! the default DNS queue, after the connection queues; the L7 queues are
//! then 103 and 104; UDP queries are copied to the DNS worker's NFLOG
//! group 101 and go on, not queued):
//!
//! ```text
//! -A TOLLGATE-INPUT -p tcp -m multiport ! --ports 53 -m conntrack --ctstate RELATED,ESTABLISHED -m connmark --mark 0x100000/0xf00000 -j ACCEPT
//! -A TOLLGATE-INPUT -p udp -m multiport ! --ports 53 -m conntrack --ctstate RELATED,ESTABLISHED -m connmark --mark 0x100000/0xf00000 -j ACCEPT
//! …
//! -A TOLLGATE-INPUT -p udp -m udp --sport 53 -m conntrack --ctstate ESTABLISHED --ctdir REPLY -j NFQUEUE --queue-num 102
//! -A TOLLGATE-INPUT -p tcp -m tcp --sport 53 -m conntrack --ctstate ESTABLISHED --ctdir REPLY -j NFQUEUE --queue-num 102
//! -A TOLLGATE-INPUT -p udp -m udp --dport 53 -m conntrack --ctstate ESTABLISHED --ctdir ORIGINAL -m connmark --mark 0x100000/0xf00000 -j NFLOG --nflog-group 101 --nflog-threshold 1
//! -A TOLLGATE-INPUT -p tcp -m tcp --dport 53 -m conntrack --ctstate ESTABLISHED --ctdir ORIGINAL -m connmark --mark 0x100000/0xf00000 -j NFQUEUE --queue-num 102
//! -A TOLLGATE-INPUT -m conntrack --ctstate RELATED,ESTABLISHED -m connmark --mark 0x100000/0xf00000 -j ACCEPT
//! ```
//!
//! and `ipset save` shows one timeout set per selector and family, whose
//! entries only the DNS worker writes ([`ipset_netlink`]):
//! `create tollgate-fqdn-<10 hex digits of SHA-1(selector)>-v4 hash:ip family
//! inet hashsize 1024 maxelem 65536 timeout 300 …` and `add … 10.0.0.9
//! timeout 287`. Fail-open adds `--queue-bypass` to every NFQUEUE
//! rule; a single queue is `--queue-num N`; configured interfaces put
//! `-i IF` (INPUT), `-o IF` (OUTPUT) or both (FORWARD) on the NFQUEUE
//! rules, and on the ICMP drops; privileged entries become `-s CIDR [-p P]
//! -m set ! --match-set tollgate-endpoints-v4 src [-m P --dport N] -j
//! ACCEPT` on INPUT (never an enforced endpoint), `-d … dst …` on OUTPUT
//! and, only for an entry whose `hooks` lists `forward`, `-s CIDR …` and
//! `-d CIDR …` without the set on FORWARD, after the ICMP drops and before
//! the NFQUEUE rules (no `-s`/`-d` for `0.0.0.0/0` and `::/0`, which
//! iptables-save omits). Everything not matched falls off the end of the
//! owned chain and continues in the built-in chain untouched.

pub mod antispoof;
pub mod cache;
pub mod diff;
#[cfg(any(test, feature = "test-util"))]
pub mod fake;
pub mod ipset_netlink;
pub mod kernel;
pub mod plan;
pub mod retry;
pub mod roles;
pub mod state;
pub mod transition;
pub mod visibility;

pub use diff::Changes;
pub use kernel::{
    known_or_read, learned_sets, reconcile, reconcile_from, teardown, Backend, Iptables, Kernel,
};
pub use plan::{desired, startup, Hook};
pub use retry::{Backoff, Recovered, Retry};
pub use state::{Family, LearnedSet, State};
pub use transition::{adopted, owns_anything, Step};

/// Why the kernel state could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum DatapathError {
    #[error("{command}: {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    #[error("{command}: exited with {status}: {stderr}{}", input_note(.failing_input))]
    Failed {
        command: String,
        status: String,
        stderr: String,
        /// The input line the command complained about, when it named one.
        failing_input: Option<String>,
    },
    #[error("cannot tell the iptables backend from `iptables -V`: {version:?}")]
    UnknownBackend { version: String },
    /// `ipset help` does not list a set type tollgate creates.
    #[error("`ipset help` lists no {kind} sets: ipset too old or incomplete")]
    UnknownSetType { kind: String },
    /// The netlink socket for set writes could not be opened.
    #[error("ipset netlink socket: {0}")]
    SetSocket(ipset_netlink::NetlinkError),
    /// A set write the kernel refused (the writes before it stay).
    #[error(transparent)]
    Sets(ipset_netlink::SetWriteError),
}

/// A reconcile that did not complete. What earlier steps wrote stays (see
/// [`transition`] for why that is safe).
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// Reading the installed state (`*-save`, `ipset save`) failed.
    #[error("reading the installed state: {0}")]
    Read(DatapathError),
    /// A write failed.
    #[error("{step}: {source}")]
    Write { step: Step, source: DatapathError },
}

impl ApplyError {
    /// A short name of the failing step, for metric labels.
    pub fn label(&self) -> &'static str {
        match self {
            ApplyError::Read(_) => "read",
            ApplyError::Write { step, .. } => step.label(),
        }
    }
}

fn input_note(line: &Option<String>) -> String {
    line.as_ref()
        .map(|l| format!(" (input: {l:?})"))
        .unwrap_or_default()
}
