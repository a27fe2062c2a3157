//! Files through the real `fs` component: `apply_patch` (multi-file,
//! dry run, all or nothing), PDF and DOCX text from `read_file` (fixtures
//! and hostile files, parsed in the sandbox), and document attachments that
//! RESTORE turns into text for the model.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use chitin::bus::InboundMessage;
use chitin::plugins::{CallContext, PluginCatalog, PluginError, PluginRuntime, RuntimeConfig, ToolFailure};
use chitin_testing::{MockLlm, MockReply};
use chitin::tools::{ToolError, ToolRegistry};
use chitin_testing::agent::{TestAgent, request_messages};
use chitin_testing::shared_cache_dir;
use serde_json::json;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(name)
}

/// The built-in plugins over a fresh workspace.
fn registry() -> (ToolRegistry, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let runtime = Arc::new(
        PluginRuntime::new(RuntimeConfig { workspace: dir.path().to_path_buf(), cache_dir: Some(shared_cache_dir()), limits: Default::default() }).unwrap(),
    );
    let catalog = PluginCatalog::load(&runtime, &BTreeMap::new(), None, &[]).unwrap();
    (ToolRegistry::new(runtime, &catalog).unwrap(), dir)
}

async fn call(tools: &ToolRegistry, name: &str, args: serde_json::Value) -> Result<String, ToolError> {
    tools.call(name, &args, &CallContext::default(), None).await
}

/// The guest's own error message, or a panic naming what came instead (a
/// trap, a timeout: a host-looking failure the tests must never see).
fn guest_message(result: Result<String, ToolError>) -> String {
    match result {
        Err(ToolError::Plugin(PluginError::Tool { kind: ToolFailure::Failed | ToolFailure::InvalidArgs | ToolFailure::Denied, message })) => message,
        other => panic!("expected the component's own error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn apply_patch_changes_several_files_in_one_call_or_none() {
    let (tools, dir) = registry();
    let ws = dir.path();
    std::fs::write(ws.join("app.py"), "def greet():\n    print(\"hi\")\n\ndef main():\n    greet()\n").unwrap();
    std::fs::write(ws.join("old.txt"), "bye\n").unwrap();
    let patch = "*** Begin Patch\n\
*** Add File: docs/readme.md\n\
+# App\n\
*** Update File: app.py\n\
@@ def greet():\n\
-    print(\"hi\")\n\
+    print(\"hello\")\n\
*** Delete File: old.txt\n\
*** End Patch\n";

    let preview = call(&tools, "apply_patch", json!({"patch": patch, "dry_run": true})).await.unwrap();
    assert!(preview.starts_with("dry run, nothing was written: the patch applies and would change 3 files"), "{preview}");
    assert!(preview.contains("M app.py (+1 -1)") && preview.contains("-    print(\"hi\")\n+    print(\"hello\")"), "{preview}");
    assert!(!ws.join("docs").exists() && ws.join("old.txt").exists());

    // One stale hunk: nothing at all is written, and the error shows where.
    let stale = patch.replace("-    print(\"hi\")", "-    print(\"hey\")");
    let err = guest_message(call(&tools, "apply_patch", json!({"patch": stale})).await);
    assert!(err.starts_with("app.py: hunk 1 (patch line 5) does not match the file after line 1"), "{err}");
    assert!(err.contains("2|     print(\"hi\")"), "{err}");
    assert!(!ws.join("docs").exists() && ws.join("old.txt").exists());

    let done = call(&tools, "apply_patch", json!({"patch": patch})).await.unwrap();
    assert_eq!(done, "applied the patch: 3 files changed\nA docs/readme.md (+1)\nM app.py (+1 -1)\nD old.txt (-1)");
    assert_eq!(std::fs::read_to_string(ws.join("docs/readme.md")).unwrap(), "# App\n");
    assert!(std::fs::read_to_string(ws.join("app.py")).unwrap().contains("print(\"hello\")"));
    assert!(!ws.join("old.txt").exists());

    // The structured form, and paths that leave the workspace.
    let out = call(&tools, "apply_patch", json!({"edits": [{"path": "app.py", "action": "replace", "old_text": "hello", "new_text": "howdy"}]})).await.unwrap();
    assert_eq!(out, "applied the patch: 1 file changed\nM app.py (+1 -1)");
    let err = guest_message(call(&tools, "apply_patch", json!({"patch": "*** Begin Patch\n*** Add File: ../out.txt\n+x\n*** End Patch"})).await);
    assert_eq!(err, "path must be relative to the workspace: ../out.txt");
    assert!(!ws.parent().unwrap().join("out.txt").exists());
    let err = call(&tools, "apply_patch", json!({"edits": [{"path": "a", "action": "delete"}]})).await.unwrap_err();
    assert!(matches!(err, ToolError::InvalidArguments { .. }), "the schema knows the actions: {err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_read_only_grant_refuses_the_patch_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "a\n").unwrap();
    let runtime = Arc::new(
        PluginRuntime::new(RuntimeConfig { workspace: dir.path().to_path_buf(), cache_dir: Some(shared_cache_dir()), limits: Default::default() }).unwrap(),
    );
    let grants = BTreeMap::from([("fs".to_string(), chitin::plugins::GrantConfig { workspace: chitin::plugins::WorkspaceAccess::Read, ..Default::default() })]);
    let catalog = PluginCatalog::load(&runtime, &grants, None, &[]).unwrap();
    let tools = ToolRegistry::new(runtime, &catalog).unwrap();
    let patch = "*** Begin Patch\n*** Update File: a.txt\n-a\n+A\n*** Add File: b.txt\n+b\n*** End Patch";
    let err = guest_message(call(&tools, "apply_patch", json!({"patch": patch})).await);
    assert!(err.contains("read-only") && err.contains("Nothing was changed"), "{err}");
    assert_eq!(std::fs::read_to_string(dir.path().join("a.txt")).unwrap(), "a\n");
    assert!(!dir.path().join("b.txt").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn read_file_extracts_pdf_and_docx_inside_the_sandbox() {
    let (tools, dir) = registry();
    std::fs::copy(fixture("report.pdf"), dir.path().join("report.pdf")).unwrap();
    // Misnamed: the magic bytes decide.
    std::fs::copy(fixture("notes.docx"), dir.path().join("notes.bin")).unwrap();
    let pdf = call(&tools, "read_file", json!({"path": "report.pdf"})).await.unwrap();
    assert!(pdf.starts_with("(text extracted from a PDF of 2 pages)\n    1| --- page 1 of 2 ---\n"), "{pdf}");
    assert!(pdf.contains("The launch code word is PELICAN-42.") && pdf.contains("Second page: budget approved."), "{pdf}");
    let page = call(&tools, "read_file", json!({"path": "report.pdf", "offset": 4, "limit": 2})).await.unwrap();
    assert!(page.starts_with("(text extracted from a PDF of 2 pages)\n    4| --- page 2 of 2 ---\n"), "{page}");
    let docx = call(&tools, "read_file", json!({"path": "notes.bin"})).await.unwrap();
    assert_eq!(
        docx,
        "(text extracted from a Word document of 4 paragraphs)\n    1| Chitin fixture notes\n    2| The meeting moved to Thursday & the room is 4B.\n    3| Owner\tAda"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_documents_get_clear_errors_not_traps() {
    let (tools, dir) = registry();
    let ws = dir.path();
    // A DOCX whose document.xml inflates to 64 MiB from about 64 KiB.
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let deflated = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    zip.start_file("word/document.xml", deflated).unwrap();
    let chunk = vec![b'<'; 1 << 20];
    for _ in 0..64 {
        zip.write_all(&chunk).unwrap();
    }
    let bomb = zip.finish().unwrap().into_inner();
    assert!(bomb.len() < 300_000, "{}", bomb.len());
    std::fs::write(ws.join("bomb.docx"), &bomb).unwrap();
    let err = guest_message(call(&tools, "read_file", json!({"path": "bomb.docx"})).await);
    assert!(err.starts_with("cannot extract the text of bomb.docx (DOCX): word/document.xml would inflate to 67108864 bytes"), "{err}");

    let pdf = std::fs::read(fixture("report.pdf")).unwrap();
    std::fs::write(ws.join("cut.pdf"), &pdf[..pdf.len() / 2]).unwrap();
    std::fs::write(ws.join("junk.pdf"), b"%PDF-1.7\n\x00\x01\x02 trailer << /Root 9 0 R >>").unwrap();
    std::fs::write(ws.join("fake.docx"), b"\x00\x01not a zip").unwrap();
    for name in ["cut.pdf", "junk.pdf"] {
        match call(&tools, "read_file", json!({"path": name})).await {
            // lopdf may recover what a cut file still holds.
            Ok(text) => assert!(text.starts_with("(text extracted from a PDF"), "{name}: {text}"),
            Err(e) => {
                let err = guest_message(Err(e));
                assert!(err.starts_with(&format!("cannot extract the text of {name} (PDF)")), "{err}");
            }
        }
    }
    let err = guest_message(call(&tools, "read_file", json!({"path": "fake.docx"})).await);
    assert!(err.starts_with("fake.docx is not a readable DOCX"), "{err}");
    // The sandbox is intact: the next call works.
    std::fs::write(ws.join("ok.txt"), "fine\n").unwrap();
    assert_eq!(call(&tools, "read_file", json!({"path": "ok.txt"})).await.unwrap(), "    1| fine");
}

#[tokio::test(flavor = "multi_thread")]
async fn document_attachments_reach_the_model_as_text() {
    let mock = MockLlm::start(vec![MockReply::text("Read it.")]);
    let t = TestAgent::new(mock);
    // Outside the workspace, where a channel would have downloaded them.
    let inbox = tempfile::tempdir().unwrap();
    let pdf = inbox.path().join("Quarterly report.pdf");
    std::fs::copy(fixture("report.pdf"), &pdf).unwrap();
    let docx = inbox.path().join("notes.docx");
    std::fs::copy(fixture("notes.docx"), &docx).unwrap();
    let text = inbox.path().join("list.csv");
    std::fs::write(&text, "item,qty\nmilk,2\n").unwrap();
    let broken = inbox.path().join("broken.pdf");
    std::fs::write(&broken, b"\x00\x01 not a pdf").unwrap();
    let image = inbox.path().join("photo.png");
    std::fs::write(&image, b"\x89PNG\r\n\x1a\n").unwrap();

    let mut message = InboundMessage::new("cli", "user", "test", "What do these say?");
    message.media = vec![pdf.clone(), docx.clone(), text.clone(), broken.clone(), image.clone(), inbox.path().join("gone.pdf")];
    let outcome = t.agent.process(message, chitin::agent::sink::silent()).await;
    assert!(matches!(outcome, chitin::agent::TurnOutcome::Done(_)));

    let messages = request_messages(&t.mock, 0);
    let user = &messages.iter().find(|(role, _)| role == "user").expect("a user message").1;
    assert!(user.starts_with("What do these say?\n"), "{user}");
    let pdf_block = format!("[attachment: {} (text extracted from a PDF of 2 pages), its text:]\n--- page 1 of 2 ---\n", pdf.display());
    assert!(user.contains(&pdf_block), "{user}");
    assert!(user.contains("The launch code word is PELICAN-42."), "{user}");
    assert!(user.contains(&format!("[end of attachment: {}]", pdf.display())), "{user}");
    assert!(user.contains("The meeting moved to Thursday & the room is 4B."), "{user}");
    assert!(user.contains("(text file), its text:]\nitem,qty\nmilk,2"), "{user}");
    assert!(user.contains(&format!("[attachment: {} — its text could not be extracted: broken.pdf is not a readable PDF", broken.display())), "{user}");
    assert!(user.contains("gone.pdf — its text could not be extracted: cannot open it"), "{user}");
    // Images keep their own path: not extracted as text; this one is not
    // where the host stores downloads, so it is not read either.
    assert!(!user.contains("photo.png (text"), "{user}");
    assert!(user.contains(&format!("[image {} not shown: it is not in the media directory]", image.display())), "{user}");
    // Persisted with the text, so the next turn still has it.
    let stored = t.stored("cli:test");
    assert!(stored.messages[0].content.as_deref().unwrap_or_default().contains("PELICAN-42"));
    assert_eq!(stored.messages[0].meta.get("media"), Some(&json!([image.display().to_string()])));
}

#[tokio::test(flavor = "multi_thread")]
async fn attachment_text_is_capped() {
    let mock = MockLlm::start(vec![MockReply::text("ok")]);
    let t = TestAgent::with_config(mock, "max_attachment_kb = 1");
    let inbox = tempfile::tempdir().unwrap();
    let long = inbox.path().join("long.txt");
    std::fs::write(&long, "0123456789\n".repeat(1000)).unwrap();
    let mut message = InboundMessage::new("cli", "user", "test", "summarise");
    message.media = vec![long];
    t.agent.process(message, chitin::agent::sink::silent()).await;
    let messages = request_messages(&t.mock, 0);
    let user = &messages.iter().find(|(role, _)| role == "user").unwrap().1;
    assert!(user.contains("[… cut: the attachment's text is longer than the 1024 bytes shown]"), "{user}");
    assert!(user.len() < 1500, "{}", user.len());
}
