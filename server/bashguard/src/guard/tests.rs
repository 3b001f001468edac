use super::*;

/// The path refused, or None when allowed.
fn refused(command: &str, cwd: Option<&str>) -> Option<String> {
    check(command, cwd).err().map(|refusal| refusal.path)
}

#[test]
fn refuses_writes_to_virtual_paths() {
    let cases: &[(&str, Option<&str>, &str)] = &[
        // Redirections.
        ("echo x > /memory/a", None, "/memory/a"),
        ("echo x >> /skills/s/SKILL.md", None, "/skills/s/SKILL.md"),
        ("echo x > /agents/reviewer.md", None, "/agents/reviewer.md"),
        ("cd /agents && rm reviewer.md", None, "/agents/reviewer.md"),
        ("echo x >| /memory/a", None, "/memory/a"),
        ("echo x &> /memory/a", None, "/memory/a"),
        ("echo x &>> /memory/a", None, "/memory/a"),
        ("echo x 2> /memory/err", None, "/memory/err"),
        ("echo x >& /memory/a", None, "/memory/a"),
        ("exec 3<> /memory/a", None, "/memory/a"),
        ("cat > /memory/a <<EOF\nx\nEOF", None, "/memory/a"),
        ("cat <<EOF > /memory/a\nx\nEOF", None, "/memory/a"),
        ("{ echo a; echo b; } > /memory/a", None, "/memory/a"),
        // Quoting and normalisation.
        ("echo x > \"/memory/a\"", None, "/memory/a"),
        ("echo x > '/memory/a'", None, "/memory/a"),
        ("echo x > \\/memory/a", None, "/memory/a"),
        ("echo x > /mem\"ory\"/a", None, "/memory/a"),
        ("echo x > \"/memory\"/a", None, "/memory/a"),
        ("echo x > $'/memory/a'", None, "/memory/a"),
        ("echo x > /workspace/../memory/a", None, "/memory/a"),
        ("echo x > //memory/./a", None, "/memory/a"),
        ("touch ~/../memory/a", None, "/memory/a"),
        // The tracked working directory.
        ("cd /memory && touch b", None, "/memory/b"),
        ("cd /memory; echo hi > b", None, "/memory/b"),
        ("cd / && echo > memory/a", None, "/memory/a"),
        ("cd /workspace && echo x > ../memory/a", None, "/memory/a"),
        ("cd /memory\ntouch b", None, "/memory/b"),
        ("cd /memory && ls | touch b", None, "/memory/b"),
        ("cd /memory && echo x > b", None, "/memory/b"),
        ("cd /memory && echo a || echo x > b", None, "/memory/b"),
        ("cd /memory && ls | cat > b", None, "/memory/b"),
        ("true && echo x > /skills/a", None, "/skills/a"),
        ("(cd /memory && touch b)", None, "/memory/b"),
        ("pushd /skills && rm x", None, "/skills/x"),
        ("touch b", Some("/memory"), "/memory/b"),
        ("touch b", Some("/memory/sub/.."), "/memory/b"),
        ("rm ../skills/x", Some("/memory"), "/skills/x"),
        // Commands writing to their operands.
        ("echo x | tee -a /memory/log", None, "/memory/log"),
        ("rm -rf /memory", None, "/memory"),
        ("rm -rf /skills/", None, "/skills"),
        ("mv /memory/a /workspace/a", None, "/memory/a"),
        ("mv /workspace/a /memory/a", None, "/memory/a"),
        ("mv -t /memory /workspace/a", None, "/memory"),
        ("mkdir -p /skills/new/dir", None, "/skills/new/dir"),
        ("chmod 644 /memory/a", None, "/memory/a"),
        ("truncate -s 0 /memory/a", None, "/memory/a"),
        ("touch /memory/*", None, "/memory/*"),
        ("rm /memory/{a,b}", None, "/memory/{a,b}"),
        ("/bin/rm /memory/a", None, "/memory/a"),
        // Destinations.
        ("cp f /skills/x/", None, "/skills/x"),
        ("cp -t /skills/x f", None, "/skills/x"),
        ("cp -rt/skills/x f", None, "/skills/x"),
        ("cp --target-directory=/skills/x f", None, "/skills/x"),
        ("cp a b /memory/dir", None, "/memory/dir"),
        ("ln -s /etc/passwd /memory/p", None, "/memory/p"),
        ("ln -s /etc/passwd", Some("/memory"), "/memory"),
        ("install -m 644 f /skills/x/f", None, "/skills/x/f"),
        ("install -d /skills/new", None, "/skills/new"),
        ("rsync -a src/ /memory/x/", None, "/memory/x"),
        ("scp host:f /memory/f", None, "/memory/f"),
        // In place.
        ("sed -i s/a/b/ /memory/MEMORY.md", None, "/memory/MEMORY.md"),
        ("sed -i.bak -e s/a/b/ /memory/MEMORY.md", None, "/memory/MEMORY.md"),
        ("sed -e s/a/b/ -i /memory/MEMORY.md", None, "/memory/MEMORY.md"),
        ("sed --in-place 's/a/b/' /memory/MEMORY.md", None, "/memory/MEMORY.md"),
        ("perl -pi -e 's/a/b/' /memory/a", None, "/memory/a"),
        ("perl -i.bak -pe 's/a/b/' /memory/a", None, "/memory/a"),
        ("ruby -i -pe 'x' /skills/a", None, "/skills/a"),
        // Other writers.
        ("dd if=/dev/zero of=/memory/z count=1", None, "/memory/z"),
        ("tar -xf a.tar -C /skills", None, "/skills"),
        ("tar xzf a.tgz -C /skills/x", None, "/skills/x"),
        ("tar -xf /workspace/a.tar", Some("/skills"), "/skills"),
        ("tar -czf /memory/a.tgz src", None, "/memory/a.tgz"),
        ("unzip a.zip -d /skills/x", None, "/skills/x"),
        ("unzip -o a.zip", Some("/memory"), "/memory"),
        ("git clone https://h/r.git /skills/r", None, "/skills/r"),
        ("git clone https://h/r.git", Some("/skills"), "/skills"),
        ("git init /memory/repo", None, "/memory/repo"),
        ("git -C /memory commit -m x", None, "/memory"),
        ("cd /skills && git add .", None, "/skills"),
        ("find /memory -name '*.tmp' -delete", None, "/memory"),
        ("find /memory -exec rm {} \\;", None, "/memory"),
        ("find . -name x -exec cp {} /memory/ \\;", None, "/memory"),
        // Wrappers.
        ("sudo tee /memory/a", None, "/memory/a"),
        ("sudo -u root rm /memory/a", None, "/memory/a"),
        ("env A=1 B=2 rm /memory/a", None, "/memory/a"),
        ("A=1 rm /memory/a", None, "/memory/a"),
        ("command rm /memory/a", None, "/memory/a"),
        ("nice -n 5 touch /memory/a", None, "/memory/a"),
        ("nohup rm /memory/a", None, "/memory/a"),
        ("timeout -s KILL 5 rm /memory/a", None, "/memory/a"),
        ("time rm /memory/a", None, "/memory/a"),
        ("ls | xargs -I{} cp {} /memory/", None, "/memory"),
        ("xargs rm /memory/a", None, "/memory/a"),
        // Inside the tree.
        ("bash -c 'echo x > /memory/a'", None, "/memory/a"),
        ("sh -ec \"cd /memory && touch x\"", None, "/memory/x"),
        ("eval 'rm /memory/a'", None, "/memory/a"),
        ("eval cd /memory; touch b", None, "/memory/b"),
        ("for f in a b; do touch /memory/$f; done", None, "/memory/$f"),
        ("if true; then mkdir /skills/new; fi", None, "/skills/new"),
        ("if false; then :; else rm /memory/a; fi", None, "/memory/a"),
        ("while true; do rm /memory/a; done", None, "/memory/a"),
        ("case x in a) rm /memory/a;; esac", None, "/memory/a"),
        ("f() { touch /memory/a; }", None, "/memory/a"),
        ("x=$(echo 1 > /memory/a)", None, "/memory/a"),
        ("echo $(rm /memory/a)", None, "/memory/a"),
        ("echo \"`rm /memory/a`\"", None, "/memory/a"),
        ("diff <(rm /memory/a) b", None, "/memory/a"),
        ("! rm /memory/a", None, "/memory/a"),
        ("true && (false || rm /memory/a)", None, "/memory/a"),
        ("cat <<EOF\n$(rm /memory/a)\nEOF", None, "/memory/a"),
        ("rm /memory/a\nfi )", None, "/memory/a"),
    ];
    let mut failures = Vec::new();
    for (command, cwd, path) in cases {
        let got = refused(command, *cwd);
        if got.as_deref() != Some(*path) {
            failures.push(format!("{command:?} (cwd {cwd:?}): expected {path}, got {got:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn allows_reads_and_writes_elsewhere() {
    let cases: &[(&str, Option<&str>)] = &[
        ("cat /memory/a", None),
        ("grep -r term /skills", None),
        ("ls -la /memory /skills", None),
        ("ls /memory/*", None),
        ("cp /memory/a /workspace/b", None),
        ("cp /skills/x/SKILL.md .", None),
        ("cp -r /memory /workspace/", None),
        ("diff /memory/a b", None),
        ("cd /skills && ls", None),
        ("cd /memory; cd /workspace && touch b", None),
        ("(cd /memory) && touch b", None),
        ("cd /memory | touch b", None),
        ("cd /workspace && echo x > b", Some("/memory")),
        ("echo x > b && cd /memory", None),
        ("x=$(cd /memory) && touch b", None),
        ("cd /memory; cd; touch b", None),
        ("cd /memory; cd ~ && touch b", None),
        ("cd /memory; cd - && touch b", None),
        ("cd $DIR && touch b", None),
        ("if x; then cd /memory; fi; touch b", None),
        ("echo /memory/a", None),
        ("echo \"x > /memory/a\"", None),
        ("grep '> /memory/a' f", None),
        ("grep foo /memory/a > out.txt", None),
        ("grep foo /memory/a > /workspace/out", None),
        ("cd /memory && cat a > /workspace/b", None),
        ("echo x > /memoryx/a", None),
        ("echo x > /memory.bak", None),
        ("echo x > /workspace/memory/a", None),
        ("echo x > memory/a", None),
        ("echo x > /mem$X/a", None),
        ("echo x > /memory$X", None),
        ("echo x > $OUT", None),
        ("echo x > ~user/a", None),
        ("echo x 2>&1", None),
        ("echo x >&2", None),
        ("echo x > /dev/null", None),
        ("sed s/a/b/ /memory/MEMORY.md > /workspace/m", None),
        ("sed -n 1p /memory/a", None),
        ("sed -e s/a/b/ /memory/a", None),
        ("perl -ne print /memory/a", None),
        ("wc -l < /memory/a", None),
        ("cat <<< /memory/a", None),
        ("while read l; do echo $l; done < /memory/a", None),
        ("tee /workspace/log < /memory/a", None),
        ("dd if=/memory/a of=/workspace/b", None),
        ("ln -s /memory/a /workspace/a", None),
        ("rsync -a /skills/ /workspace/skills/", None),
        ("rm -rf /workspace/build", None),
        ("rm /memoryx", None),
        ("mkdir -p /workspace/skills", None),
        ("touch -r /memory/a /workspace/b", None),
        ("touch $f", Some("/memory")),
        ("tar -tf /memory/a.tar", None),
        ("tar -xf /memory/a.tar -C /workspace", None),
        ("tar -cf /workspace/a.tar /memory", None),
        ("tar -xOf a.tar", Some("/memory")),
        ("unzip -l /memory/a.zip", None),
        ("unzip /memory/a.zip -d /workspace/x", None),
        ("find /memory -name '*.md'", None),
        ("find /memory -exec grep x {} +", None),
        ("find /memory -exec cp {} /workspace/ \\;", None),
        ("find /workspace -delete", None),
        ("git status", None),
        ("git -C /memory log", None),
        ("git clone https://h/r.git /workspace/r", None),
        ("cd /memory && git status", None),
        ("command -v rm", None),
        ("sudo ls /memory", None),
        ("bash -c \"$CMD\"", None),
        ("bash script.sh /memory/a", None),
        ("python3 -c \"open('/memory/a','w')\"", None),
        ("echo \"unterminated", None),
        ("echo x > ", None),
        ("((( ", None),
        ("", None),
        ("touch b", None),
        ("touch b", Some("/workspace/memory")),
    ];
    let mut failures = Vec::new();
    for (command, cwd) in cases {
        if let Some(path) = refused(command, *cwd) {
            failures.push(format!("{command:?} (cwd {cwd:?}): refused {path}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn message_names_the_path_and_the_tools() {
    let refusal = check("echo x > /memory/a", None).unwrap_err();
    assert_eq!(refusal.path, "/memory/a");
    assert_eq!(
        refusal.message,
        "Refused before running: this command writes to /memory/a (a redirection). /memory, \
         /skills and /agents are shared with your whole org and are read-only in Bash; use \
         the Write or Edit tool on /memory/a instead (every change is versioned). Nothing \
         was run."
    );
    let refusal = check("rm /skills/x/SKILL.md", None).unwrap_err();
    assert!(refusal.message.contains("writes to /skills/x/SKILL.md (`rm`)"));
    assert!(refusal.message.contains("Write or Edit tool"));
}

#[test]
fn paths_are_normalised_lexically() {
    assert_eq!(normalise("/a//b/./c/../d/"), "/a/b/d");
    assert_eq!(normalise("/.."), "/");
    assert_eq!(normalise("/"), "/");
    assert!(is_virtual("/memory"));
    assert!(is_virtual("/skills/a"));
    assert!(!is_virtual("/memoryx"));
    assert!(!is_virtual("/"));
    assert!(!is_virtual("/workspace/memory"));
    assert!(may_hold_virtual("/"));
    assert!(may_hold_virtual("/memory/x"));
    assert!(!may_hold_virtual("/workspace"));
    assert!(!may_hold_virtual("/mem"));
}

#[test]
fn long_and_deep_commands_stay_cheap() {
    let chain = "touch /workspace/a && ".repeat(4_000) + "touch /memory/a";
    assert!(chain.len() > 64 * 1024);
    assert_eq!(refused(&chain, None).as_deref(), Some("/memory/a"));
    let pipes = "cat /memory/a | ".repeat(5_000) + "wc -l";
    assert_eq!(refused(&pipes, None), None);
    let deep = "(".repeat(10_000) + "touch /memory/a" + &")".repeat(10_000);
    assert_eq!(refused(&deep, None), None, "beyond the depth limit, let through");
    let nested = "bash -c \"bash -c 'bash -c true'\"; ".repeat(500);
    assert_eq!(refused(&nested, None), None);
    let huge = "x".repeat(MAX_CHECKED_LEN + 1);
    assert_eq!(refused(&huge, None), None);
}
