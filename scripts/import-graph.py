#!/usr/bin/env python3
"""The import graph of a Rust source tree: its modules, the `crate::` and `super::` arrows
between them, and every circle (modules that import each other in a loop).

Usage: scripts/import-graph.py crates/proxy/src crates/config/src
Test modules (`tests`, `testing`, `#[cfg(test)] mod tests`) and comments are left out.
"""
import os
import re
import sys


def graph(root):
    mods={}
    for d,_,fs in os.walk(root):
        for f in fs:
            if not f.endswith('.rs'): continue
            p=os.path.join(d,f); rel=os.path.relpath(p,root)[:-3].split(os.sep)
            if rel[-1]=='mod': rel=rel[:-1]
            if rel==['lib']: rel=[]
            if 'tests' in rel or rel[-1:]==['testing']: continue
            mods[tuple(rel)]=p
    def resolve(path):
        for n in range(len(path),0,-1):
            if tuple(path[:n]) in mods: return tuple(path[:n])
    edges=set()
    for m,p in mods.items():
        s=open(p).read()
        i=s.find('#[cfg(test)]\nmod tests')
        if i>=0: s=s[:i]
        s='\n'.join(l for l in s.split('\n') if not l.strip().startswith('//'))
        for mm in re.finditer(r'\b(crate|super)::((?:[a-z_][a-z0-9_]*::)*[a-z_][a-z0-9_]*)',s):
            kind,path=mm.group(1),mm.group(2).split('::')
            base=[] if kind=='crate' else (list(m[:-1]) if not p.endswith('mod.rs') else list(m))
            if kind=='super' and p.endswith('mod.rs'): base=list(m[:-1])
            t=resolve(base+path)
            if t is not None and t!=m and t!=(): edges.add((m,t))
        # braces: crate::x::{a, b}
        for mm in re.finditer(r'\b(crate|super)::((?:[a-z_][a-z0-9_]*::)*)\{([^}]*)\}',s):
            kind,prefix,inner=mm.group(1),mm.group(2),mm.group(3)
            base=[] if kind=='crate' else list(m[:-1])
            for item in inner.split(','):
                item=item.strip().split('::')[0]
                if not item: continue
                t=resolve(base+[x for x in prefix.split('::') if x]+[item])
                if t is not None and t!=m and t!=(): edges.add((m,t))
    # tarjan
    idx={};low={};st=[];on=set();sccs=[];c=[0]
    adj={}
    for a,b in edges: adj.setdefault(a,[]).append(b)
    sys.setrecursionlimit(10000)
    def sc(v):
        idx[v]=low[v]=c[0];c[0]+=1;st.append(v);on.add(v)
        for w in adj.get(v,[]):
            if w not in idx: sc(w); low[v]=min(low[v],low[w])
            elif w in on: low[v]=min(low[v],idx[w])
        if low[v]==idx[v]:
            comp=[]
            while True:
                w=st.pop();on.discard(w);comp.append(w)
                if w==v: break
            if len(comp)>1: sccs.append(comp)
    for v in mods:
        if v and v not in idx: sc(v)
    print(f"{root}: {len([m for m in mods if m])} modules, {len(edges)} import arrows, {len(sccs)} circles" + ''.join(f"\n  circle of {len(x)}: "+', '.join('/'.join(y) for y in sorted(x)) for x in sccs))


for root in sys.argv[1:]:
    graph(root)
