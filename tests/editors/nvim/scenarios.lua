-- One scenario of composer.nvim against the real composer-lsp, run by tests/editors/test_nvim.py:
--
--   COMPOSER_NVIM_TEST='{"scenario": "chat", "cmd": [...], "ws": "...", "result": "out.json"}' \
--     nvim --headless --clean --cmd 'set rtp^=editor-extension/nvim' -l tests/editors/nvim/scenarios.lua
--
-- Writes {"ok", "error", "seconds", "chat", ...} to `result` and exits non-zero on failure. Every
-- wait has a timeout, so a broken plugin fails the scenario instead of hanging Neovim.

local ctx = vim.json.decode(vim.env.COMPOSER_NVIM_TEST)
local START_MS = 40000 -- composer.nvim's own wait for the server to start (its default: 10 s)
local result = { scenario = ctx.scenario }
local turns = {} -- the data of each `User ComposerTurnDone`
local S = {}

vim.api.nvim_create_autocmd('User', {
  pattern = 'ComposerTurnDone',
  callback = function(args)
    turns[#turns + 1] = args.data
  end,
})

local function check(cond, message)
  if not cond then
    error(message, 2)
  end
end

-- Waits for `fn` up to `ms`: bounds on a failure, generous so that a busy machine (slow to start
-- Python, slow to answer) is not one. Neovim itself has 120 s (tests/editors/test_nvim.py).
local function wait(ms, fn, what)
  if not vim.wait(ms, fn, 10) then
    error('timed out waiting for ' .. what, 2)
  end
end

local function lines(buf)
  return vim.api.nvim_buf_get_lines(buf, 0, -1, false)
end

local function chat_text()
  local buf = vim.fn.bufnr('composer://chat')
  return buf == -1 and '' or table.concat(lines(buf), '\n')
end

-- Runs :ComposerUndo[!] (`cmd`) and returns what its User ComposerUndone event carried.
local function undo(cmd)
  local undone
  local id = vim.api.nvim_create_autocmd('User', {
    pattern = 'ComposerUndone',
    callback = function(args)
      undone = args.data
    end,
  })
  vim.cmd(cmd)
  wait(20000, function()
    return undone ~= nil
  end, ':' .. cmd .. ' to answer')
  vim.api.nvim_del_autocmd(id)
  return undone
end

local function wait_turn(n)
  wait(20000, function()
    return #turns >= n
  end, ('turn %d to end (chat so far:\n%s)'):format(n, chat_text()))
  return turns[n]
end

--- setup() as a user would, then open hello.py and wait for composer-lsp to attach to it.
local function start(config)
  require('composer').setup(
    vim.tbl_extend('force', { cmd = ctx.cmd, timeout = START_MS }, config or {})
  )
  vim.cmd.edit(vim.fn.fnameescape(ctx.ws .. '/hello.py'))
  local buf, win = vim.api.nvim_get_current_buf(), vim.api.nvim_get_current_win()
  wait(START_MS, function()
    return #vim.lsp.get_clients({ name = 'composer', bufnr = buf }) > 0
  end, 'composer-lsp to attach')
  result.root_dir = vim.lsp.get_clients({ name = 'composer', bufnr = buf })[1].root_dir
  return buf, win
end

--- A stub vim.ui.select answering its n-th question with the option whose optionId is the n-th
--- of `...` (the last one for any question after).
local function answer_permissions(...)
  local answers, asked = { ... }, {}
  vim.ui.select = function(items, opts, on_choice)
    local answer = answers[math.min(#asked + 1, #answers)]
    local names, choice = {}, nil
    for _, item in ipairs(items) do
      names[#names + 1] = opts.format_item(item)
      choice = item.optionId == answer and item or choice
    end
    asked[#asked + 1] = { prompt = opts.prompt, kind = opts.kind, options = names }
    on_choice(choice)
  end
  return asked
end

--- Wraps the plugin's session/request_permission handler (call before start()): each request
--- is marked revisable, or not, as `revisable` says, and the plugin's answer is recorded.
--- `server_marked` records whether composer-lsp marked it itself: its side of `revisable` is
--- built beside the plugin's, so what it does with the answer is checked only where it does.
local function intercept_permissions(revisable)
  local answers = {}
  local function handler(err, params, hctx)
    params._meta = params._meta or {}
    params._meta.composer = params._meta.composer or {}
    local record = { server_marked = params._meta.composer.revisable == true }
    params._meta.composer.revisable = revisable or nil
    record.answer = require('composer').on_permission(err, params, hctx)
    answers[#answers + 1] = record
    return record.answer
  end
  vim.lsp.config('composer', { handlers = { ['session/request_permission'] = handler } })
  return answers
end

--- The buffer named exactly `name`, else nil (bufnr() would take `name` as a pattern).
local function buffer_named(name)
  for _, buf in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_get_name(buf) == name then
      return buf
    end
  end
end

--- The buffer whose name matches the Lua `pattern`, else nil.
local function buffer_matching(pattern)
  for _, buf in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_get_name(buf):match(pattern) then
      return buf
    end
  end
end

local PROPOSAL = '^composer://proposal/%d+/hello%.py$'
local CURRENT = '^composer://current/%d+/hello%.py$'

--- Types `cmdline` on Neovim's command line, as a person does (`:w` accepts a proposal only
--- when typed), and runs it.
local function type_cmd(cmdline)
  vim.api.nvim_feedkeys(':' .. cmdline .. '\r', 'ntx', false)
end

--- Records vim.notify's messages (and still shows them).
local function record_notes()
  local notes, notify = {}, vim.notify
  vim.notify = function(msg, level)
    notes[#notes + 1] = { msg = msg, level = level }
    notify(msg, level)
  end
  return notes
end

--- Waits for the review of hello.py to open; checks it is a diff of the current text and the
--- proposal, with the cursor in the proposal. Returns the proposal's buffer.
local function wait_review()
  wait(20000, function()
    return buffer_matching(PROPOSAL) ~= nil
  end, ('the proposal to open (chat so far:\n%s)'):format(chat_text()))
  local proposal = buffer_matching(PROPOSAL)
  local current = buffer_matching(CURRENT)
  check(current, 'the current text is shown beside the proposal')
  check(vim.api.nvim_get_current_buf() == proposal, 'the cursor is in the proposal')
  check(vim.deep_equal(lines(proposal), { "print('goodbye')" }), 'the proposal holds newText')
  check(vim.deep_equal(lines(current), { "print('hello')" }), 'the current text is oldText')
  check(vim.bo[proposal].filetype == 'python', 'the proposal has the file type of hello.py')
  for _, buf in ipairs({ current, proposal }) do
    check(vim.wo[vim.fn.bufwinid(buf)].diff, vim.api.nvim_buf_get_name(buf) .. ' is in diff mode')
  end
  check(#vim.api.nvim_list_tabpages() == 2, 'the review has a tab of its own')
  return proposal
end

--- Checks that the review closed: its buffers gone, back in the tab the turn started from.
local function check_review_closed()
  check(not buffer_matching(PROPOSAL), 'the proposal buffer was wiped')
  check(not buffer_matching(CURRENT), 'the current-text buffer was wiped')
  check(#vim.api.nvim_list_tabpages() == 1, 'the review tab closed')
end

function S.chat()
  start()
  vim.cmd('ComposerChat say hello')
  check(vim.api.nvim_buf_get_name(0):match('composer://chat$'), 'the chat window has the focus')
  local turn = wait_turn(1)
  check(turn.stopReason == 'end_turn', 'stopReason ' .. tostring(turn.stopReason))
  check(
    chat_text():find('Hello from Composer, streamed word by word.', 1, true),
    'the reply is in the chat'
  )
  check(chat_text():find('## You\n\nsay hello', 1, true), 'the prompt is in the chat')
  -- The chat's own prompt input: `i` in the chat buffer asks with vim.ui.input.
  vim.ui.input = function(opts, on_confirm)
    result.input_prompt = opts.prompt
    on_confirm('and again')
  end
  vim.api.nvim_feedkeys('i', 'x', false)
  turn = wait_turn(2)
  check(turn.stopReason == 'end_turn', 'stopReason ' .. tostring(turn.stopReason))
  check(turn.sessionId == turns[1].sessionId, 'the second prompt went to the same session')
  check(
    chat_text():find('## You\n\nand again\n\n## Composer\n\nDone.', 1, true),
    'the second turn is in the chat'
  )
end

function S.chat_without_file()
  vim.cmd.cd(vim.fn.fnameescape(ctx.ws))
  require('composer').setup({ cmd = ctx.cmd, timeout = START_MS })
  vim.cmd('ComposerChat hi')
  local turn = wait_turn(1)
  result.root_dir = vim.lsp.get_clients({ name = 'composer' })[1].root_dir
  check(turn.stopReason == 'end_turn', 'stopReason ' .. tostring(turn.stopReason))
  check(chat_text():find('Started without a file.', 1, true), 'the reply is in the chat')
end

function S.chat_while_starting()
  require('composer').setup({ cmd = ctx.cmd, timeout = START_MS })
  vim.cmd.edit(vim.fn.fnameescape(ctx.ws .. '/hello.py'))
  vim.cmd('ComposerChat hi') -- before composer-lsp has answered initialize
  local turn = wait_turn(1)
  local clients = vim.lsp.get_clients({ name = 'composer' })
  result.root_dir = clients[1].root_dir
  check(#clients == 1, #clients .. ' clients, not one')
  check(turn.stopReason == 'end_turn', 'stopReason ' .. tostring(turn.stopReason))
  check(chat_text():find('Started with the file.', 1, true), 'the reply is in the chat')
end

function S.ask()
  start()
  vim.cmd('1ComposerAsk what does this print?')
  local turn = wait_turn(1)
  check(turn.stopReason == 'end_turn', 'stopReason ' .. tostring(turn.stopReason))
  check(
    chat_text():find("```python\nprint('hello')\n```", 1, true),
    'the selection went with the question'
  )
  check(chat_text():find('It prints hello.', 1, true), 'the answer is in the chat')
end

function S.forget_answer()
  -- A turn that only answered: :ComposerUndo! takes it out of the conversation, nothing to rewind.
  start()
  vim.cmd('ComposerChat what does this print?')
  check(wait_turn(1).stopReason == 'end_turn', 'the turn ended')
  local undone = undo('ComposerUndo!')
  check(undone.forgotTurn == true, 'the server forgot the turn')
  check(
    chat_text():find('The last turn changed no file; Composer forgot it', 1, true),
    'the chat says so'
  )
  check(not chat_text():find('Undid the last turn', 1, true), 'and claims no rewind')
end

function S.edit()
  local buf, win = start()
  vim.cmd('ComposerChat say goodbye')
  local turn = wait_turn(1)
  check(turn.stopReason == 'end_turn', 'stopReason ' .. tostring(turn.stopReason))
  result.after_edit = lines(buf)
  check(vim.deep_equal(lines(buf), { "print('goodbye')" }), 'the edit reached the buffer')
  check(vim.bo[buf].modified, 'the buffer is modified (not saved by the server)')
  local chat = chat_text()
  check(chat:find('[done]', 1, true), 'the tool call line shows done')
  check(chat:find("-print('hello')\n+print('goodbye')", 1, true), 'the chat shows the diff')
  vim.api.nvim_set_current_win(win)
  vim.cmd('normal! u')
  result.after_undo = lines(buf)
  check(vim.deep_equal(lines(buf), { "print('hello')" }), '`u` undoes the edit')
end

function S.undo_turn()
  -- Your unsaved line, then a turn whose edit reaches the same buffer unsaved: the disk never
  -- holds either, so only the buffer can take the turn back.
  local buf = start()
  vim.api.nvim_buf_set_lines(buf, 1, 1, false, { '# mine, unsaved' })
  vim.cmd('ComposerChat say goodbye')
  check(wait_turn(1).stopReason == 'end_turn', 'the turn ended')
  check(
    vim.deep_equal(lines(buf), { "print('goodbye')", '# mine, unsaved' }),
    'the edit reached the buffer'
  )
  local undone = undo('ComposerUndo')
  result.after_undo = lines(buf)
  check(vim.deep_equal(undone.buffers.reverted, { 'hello.py' }), 'the buffer was put back')
  check(
    vim.deep_equal(lines(buf), { "print('hello')", '# mine, unsaved' }),
    'your line stayed, the edit went'
  )
  check(vim.bo[buf].modified, 'still unsaved')
  check(
    chat_text():find('Undid the last turn: 0 paths restored on disk, 1 open buffers', 1, true),
    'the chat says it'
  )
  undone = undo('ComposerUndo!') -- again, and out of the conversation too
  check(undone.forgotTurn == true, 'the server forgot the turn')
  check(chat_text():find('Composer forgot the turn', 1, true), 'the chat says so')
  check(vim.deep_equal(lines(buf), { "print('hello')", '# mine, unsaved' }), 'nothing more changed')
end

function S.undo_after_restart()
  -- The server stops with the agent's edit unsaved in the buffer (a crash, :LspRestart). The next
  -- one reloads the chat's session without showing it twice, and still takes that edit back.
  local buf, win = start()
  vim.api.nvim_buf_set_lines(buf, 1, 1, false, { '# mine, unsaved' })
  vim.cmd('ComposerChat say goodbye')
  check(wait_turn(1).stopReason == 'end_turn', 'the turn ended')
  local shown = chat_text()
  local first = vim.lsp.get_clients({ name = 'composer', bufnr = buf })[1]
  first:stop(true)
  wait(START_MS, function()
    return #vim.lsp.get_clients({ name = 'composer' }) == 0
  end, 'the first server to stop')
  vim.api.nvim_set_current_win(win)
  local undone = undo('ComposerUndo') -- starts the next server, for the buffer's root
  local second = vim.lsp.get_clients({ name = 'composer', bufnr = buf })[1]
  check(second and second.id ~= first.id, 'a new server')
  result.after_undo = lines(buf)
  check(vim.deep_equal(undone.buffers.reverted, { 'hello.py' }), 'the buffer was put back')
  check(
    vim.deep_equal(lines(buf), { "print('hello')", '# mine, unsaved' }),
    'your line stayed, the edit went'
  )
  check(chat_text():sub(1, #shown) == shown, 'the chat kept what it showed')
  local _, asked = chat_text():gsub('say goodbye', '')
  check(asked == 1, 'the reloaded conversation was not shown again')
end

function S.restart_mid_turn()
  -- The server dies while a turn streams (a crash, :LspRestart on a hung turn): the turn ends in
  -- the chat, and the next prompt reloads the session and is answered.
  local buf, win = start()
  vim.cmd('ComposerChat talk')
  wait(20000, function()
    return select(2, chat_text():gsub('word', '')) >= 3
  end, 'the slow reply to stream')
  vim.lsp.get_clients({ name = 'composer', bufnr = buf })[1]:stop(true)
  wait(START_MS, function()
    return #vim.lsp.get_clients({ name = 'composer' }) == 0
  end, 'the server to stop')
  vim.api.nvim_set_current_win(win)
  vim.cmd('ComposerChat and now?')
  check(wait_turn(1).error == 'the server stopped during the turn', 'the cut turn ended')
  check(wait_turn(2).stopReason == 'end_turn', 'the next prompt was answered')
  check(chat_text():find('Answered after the restart.', 1, true), 'in the chat')
end

function S.undo_saved()
  -- The agent's edit, saved with :w: the rewind rewrites the file, and the buffer follows it.
  local buf, win = start()
  vim.cmd('ComposerChat say goodbye')
  check(wait_turn(1).stopReason == 'end_turn', 'the turn ended')
  vim.api.nvim_buf_call(buf, function()
    vim.cmd('silent write')
  end)
  check(vim.fn.readfile(ctx.ws .. '/hello.py')[1] == "print('goodbye')", 'saved')
  vim.api.nvim_set_current_win(win)
  vim.cmd('ComposerUndo')
  wait(20000, function()
    return lines(buf)[1] == "print('hello')"
  end, 'the saved buffer to follow the restored file')
  check(not vim.bo[buf].modified, 'reloaded, not edited')
end

function S.stale_edit()
  -- Typing reaches the server only after the debounce: the agent's edit is built on old text.
  vim.lsp.config('composer', { flags = { debounce_text_changes = 5000 } })
  local buf = start()
  vim.cmd('ComposerChat say goodbye')
  wait(20000, function()
    return chat_text():find('Changing', 1, true) ~= nil
  end, 'the reply to start')
  vim.api.nvim_buf_set_lines(buf, 1, 1, false, { '# typed while Composer works' })
  local turn = wait_turn(1)
  check(turn.stopReason == 'end_turn', 'stopReason ' .. tostring(turn.stopReason))
  result.after_edit = lines(buf)
  check(lines(buf)[1] == "print('hello')", 'the stale edit was not applied')
  check(chat_text():find('[failed]', 1, true), 'the stale edit failed for the agent')
end

function S.cancel()
  start()
  vim.cmd('ComposerChat talk')
  wait(20000, function()
    return select(2, chat_text():gsub('word', '')) >= 3
  end, 'the slow reply to stream')
  vim.cmd('ComposerCancel')
  local turn = wait_turn(1)
  result.words = select(2, chat_text():gsub('word', ''))
  check(turn.stopReason == 'cancelled', 'stopReason ' .. tostring(turn.stopReason))
  check(result.words < 200, 'the reply stopped early')
end

function S.permission_accept()
  local answers = intercept_permissions(false) -- a client that knows nothing of `revisable`
  local buf = start({ mode = 'review' })
  local asked = answer_permissions('allow_once')
  vim.cmd('ComposerChat say goodbye')
  local turn = wait_turn(1)
  result.asked, result.answers = asked, answers
  check(turn.stopReason == 'end_turn', 'stopReason ' .. tostring(turn.stopReason))
  check(#asked == 1, 'asked once, not ' .. #asked .. ' times')
  check(asked[1].kind == 'composer_permission', 'the select has the composer kind')
  check(vim.tbl_contains(asked[1].options, 'Allow'), 'Allow is offered')
  check(not vim.tbl_contains(asked[1].options, 'Edit, then allow'), 'no editing when not revisable')
  check(answers[1].answer._meta == nil, 'a plain allow carries no _meta')
  check(vim.deep_equal(lines(buf), { "print('goodbye')" }), 'the accepted edit reached the buffer')
  check(chat_text():find("+print('goodbye')", 1, true), 'the chat showed the diff')
end

function S.permission_reject()
  local buf = start()
  local asked = answer_permissions('reject_once')
  vim.cmd('ComposerMode review')
  wait(20000, function()
    return chat_text():find('mode: review', 1, true) ~= nil
  end, 'session/set_mode')
  vim.cmd('ComposerChat say goodbye')
  local turn = wait_turn(1)
  result.asked = asked
  check(turn.stopReason == 'end_turn', 'stopReason ' .. tostring(turn.stopReason))
  check(#asked == 1, 'asked once, not ' .. #asked .. ' times')
  check(
    vim.deep_equal(lines(buf), { "print('hello')" }),
    'the rejected edit did not reach the buffer'
  )
  check(chat_text():find('[failed]', 1, true), 'the refused call shows as failed')
end

function S.review_edit()
  local answers = intercept_permissions(true)
  local buf = start({ mode = 'review' })
  local asked = answer_permissions('composer_edit')
  vim.cmd('ComposerChat say goodbye')
  wait_review()
  vim.cmd('substitute/goodbye/see you/')
  type_cmd('w') -- accepts the proposal as edited
  local turn = wait_turn(1)
  result.asked, result.answers = asked, answers
  check(turn.stopReason == 'end_turn', 'stopReason ' .. tostring(turn.stopReason))
  check(#asked == 1, 'asked once, not ' .. #asked .. ' times')
  check(vim.tbl_contains(asked[1].options, 'Edit, then allow'), 'editing is offered')
  local answer = answers[1].answer
  check(answer.outcome.optionId == 'allow_once', 'answered allow_once')
  check(
    vim.deep_equal(answer._meta, { composer = { revisedText = "print('see you')\n" } }),
    'the answer carries the edited text, with the final newline of newText'
  )
  check_review_closed()
  if answers[1].server_marked then
    check(vim.deep_equal(lines(buf), { "print('see you')" }), 'the edited text reached the buffer')
  end
end

function S.review_unedited()
  local answers = intercept_permissions(true)
  local buf = start({ mode = 'review' })
  answer_permissions('composer_edit')
  vim.cmd('ComposerChat say goodbye')
  wait_review()
  type_cmd('wq') -- the write accepts; the quit must close only the proposal's window
  local turn = wait_turn(1)
  result.answers = answers
  check(turn.stopReason == 'end_turn', 'stopReason ' .. tostring(turn.stopReason))
  local answer = answers[1].answer
  check(answer.outcome.optionId == 'allow_once', 'answered allow_once')
  check(answer._meta == nil, 'an unedited proposal answers without _meta')
  check_review_closed()
  check(vim.deep_equal(lines(buf), { "print('goodbye')" }), 'the proposed edit reached the buffer')
end

function S.review_reject()
  local answers = intercept_permissions(true)
  local buf = start({ mode = 'review' })
  -- Edit, give the review up unwritten (back to the question), then reject.
  local asked = answer_permissions('composer_edit', 'reject_once')
  vim.cmd('ComposerChat say goodbye')
  local proposal = wait_review()
  vim.cmd('substitute/goodbye/see you/')
  local closed = pcall(vim.cmd.quit)
  check(not closed and vim.api.nvim_buf_is_valid(proposal), 'a plain :q keeps a changed proposal')
  vim.cmd('quit!')
  local turn = wait_turn(1)
  result.asked, result.answers = asked, answers
  check(turn.stopReason == 'end_turn', 'stopReason ' .. tostring(turn.stopReason))
  check(#asked == 2, 'asked again after the review closed, ' .. #asked .. ' questions in all')
  check(#answers == 1, 'answered once, not ' .. #answers .. ' times')
  local reject = { outcome = { outcome = 'selected', optionId = 'reject_once' } }
  check(
    vim.deep_equal(answers[1].answer, reject),
    'the reject carries nothing but the option: ' .. vim.inspect(answers[1].answer)
  )
  check_review_closed()
  check(
    vim.deep_equal(lines(buf), { "print('hello')" }),
    'the rejected edit did not reach the buffer'
  )
end

function S.review_cancel()
  local answers = intercept_permissions(true)
  local buf = start({ mode = 'review' })
  local asked = answer_permissions('composer_edit')
  local notes = record_notes()
  vim.cmd('ComposerChat say goodbye')
  wait_review()
  vim.cmd('substitute/goodbye/see you/')
  vim.cmd('ComposerCancel')
  local turn = wait_turn(1)
  wait(5000, function()
    return #answers == 1
  end, 'the withdrawn question to be answered')
  vim.wait(300) -- a re-asked question or a late answer would come now
  result.asked, result.answers, result.notes = asked, answers, notes
  check(turn.stopReason == 'cancelled', 'stopReason ' .. tostring(turn.stopReason))
  check_review_closed()
  check(#asked == 1, 'the withdrawn question was not asked again: ' .. #asked .. ' questions')
  check(
    vim.deep_equal(answers[1].answer, { outcome = { outcome = 'cancelled' } }),
    'the withdrawn question answers cancelled, without the text: ' .. vim.inspect(answers[1])
  )
  local told = vim.tbl_filter(function(n)
    return n.msg:find('withdrawn', 1, true)
      and n.msg:find('your edit of the proposal was not applied', 1, true)
  end, notes)
  check(#told == 1, 'told once that the edit was not applied: ' .. vim.inspect(notes))
  check(vim.deep_equal(lines(buf), { "print('hello')" }), 'no edit reached the buffer')
end

function S.review_editbang()
  local answers = intercept_permissions(true)
  local buf = start({ mode = 'review' })
  answer_permissions('composer_edit')
  vim.cmd('ComposerChat say goodbye')
  local proposal = wait_review()
  vim.cmd('substitute/goodbye/see you/')
  vim.cmd('edit!') -- "drop my changes to the proposal"
  result.after_editbang = lines(proposal)
  check(vim.api.nvim_buf_is_valid(proposal), 'the proposal is still open')
  check(vim.deep_equal(lines(proposal), { "print('goodbye')" }), ':e! restores the proposal')
  check(not vim.bo[proposal].modified, ':e! leaves the proposal unmodified')
  local current = buffer_matching(CURRENT)
  vim.api.nvim_set_current_win(vim.fn.bufwinid(current))
  vim.cmd('edit!')
  check(vim.deep_equal(lines(current), { "print('hello')" }), ':e! keeps the current text')
  vim.api.nvim_set_current_win(vim.fn.bufwinid(proposal))
  type_cmd('w')
  local turn = wait_turn(1)
  result.answers = answers
  check(turn.stopReason == 'end_turn', 'stopReason ' .. tostring(turn.stopReason))
  check(
    vim.deep_equal(
      answers[1].answer,
      { outcome = { outcome = 'selected', optionId = 'allow_once' } }
    ),
    'the proposal as proposed is a plain allow: ' .. vim.inspect(answers[1].answer)
  )
  check_review_closed()
  check(vim.deep_equal(lines(buf), { "print('goodbye')" }), 'the proposed edit reached the buffer')
end

function S.review_write_all()
  local answers = intercept_permissions(true)
  local buf = start({ mode = 'review' })
  answer_permissions('composer_edit')
  local notes = record_notes()
  vim.cmd('ComposerChat say goodbye')
  local proposal = wait_review()
  vim.cmd('substitute/goodbye/see yo/') -- half-typed
  vim.cmd('silent! wall') -- what `au FocusLost * silent! wall` and autosave plugins run
  vim.cmd('silent! write') -- a plugin's or a <Cmd> mapping's write: not typed by the person
  vim.wait(300)
  check(#answers == 0, 'an autosave did not answer: ' .. vim.inspect(answers))
  check(vim.api.nvim_buf_is_valid(proposal), 'the proposal is still open')
  check(vim.bo[proposal].modified, 'the proposal is still modified (:q still warns)')
  local copy = vim.fn.tempname() .. '.py'
  type_cmd('w ' .. vim.fn.fnameescape(copy)) -- a copy elsewhere
  vim.wait(300)
  check(#answers == 0, ':w {file} did not answer: ' .. vim.inspect(answers))
  check(vim.fn.readfile(copy, 'b')[1] == "print('see yo')", ':w {file} wrote the proposal there')
  check(vim.api.nvim_buf_is_valid(proposal), 'the proposal is still open after :w {file}')
  vim.cmd('substitute/see yo/see you/')
  type_cmd('w') -- the person's own :w accepts
  local turn = wait_turn(1)
  result.answers, result.notes = answers, notes
  check(turn.stopReason == 'end_turn', 'stopReason ' .. tostring(turn.stopReason))
  check(#answers == 1, 'answered once, not ' .. #answers .. ' times')
  check(
    vim.deep_equal(answers[1].answer._meta, { composer = { revisedText = "print('see you')\n" } }),
    'the typed :w sent the finished text: ' .. vim.inspect(answers[1].answer)
  )
  check_review_closed()
  local told = vim.tbl_filter(function(n)
    return n.msg:find('not accepted', 1, true) ~= nil
  end, notes)
  check(#told >= 1, 'the autosave was told the proposal was not accepted')
  if answers[1].server_marked then
    check(vim.deep_equal(lines(buf), { "print('see you')" }), 'the edited text reached the buffer')
  end
end

local FAR = ctx.ws .. '/far.py'

--- The hunk headers (`@@` lines) of the changes buffer and their line numbers.
local function hunk_lines(changes)
  local found = {}
  for i, line in ipairs(lines(changes)) do
    if vim.startswith(line, '@@') then
      found[#found + 1] = i
    end
  end
  return found
end

function S.changes()
  local notes = record_notes()
  local function noted(text)
    return vim.tbl_filter(function(n)
      return n.msg:find(text, 1, true) ~= nil
    end, notes)
  end
  local GONE = ctx.ws .. '/gone.py'
  vim.fn.writefile({ 'gone = True' }, GONE) -- the turn deletes it
  start()
  vim.cmd.edit(vim.fn.fnameescape(FAR)) -- the turn edits it in its buffer
  local far = vim.api.nvim_get_current_buf()
  local before = lines(far)
  vim.cmd('ComposerChat change far.py, delete gone.py')
  local turn = wait_turn(1)
  check(turn.stopReason == 'end_turn', 'stopReason ' .. tostring(turn.stopReason))
  result.after_turn = lines(far)
  check(
    lines(far)[4] == "w03 = 'one'" and lines(far)[5] == "x03 = 'two'",
    'the two lines were inserted in the buffer'
  )
  check(lines(far)[29] == "v27 = 'twenty-seven'", 'the far edit reached the buffer')
  check(vim.fn.filereadable(GONE) == 0, 'gone.py was deleted')
  check(
    chat_text():find('Changes: :ComposerChanges', 1, true),
    'the chat points at :ComposerChanges'
  )

  vim.cmd('ComposerChanges')
  wait(10000, function()
    local b = buffer_named('composer://changes')
    return b and #hunk_lines(b) > 0
  end, 'the changes to be listed')
  local changes = buffer_named('composer://changes')
  local function text()
    return table.concat(lines(changes), '\n')
  end
  local function marks()
    return vim.api.nvim_buf_get_extmarks(changes, -1, 0, -1, {})
  end
  check(vim.api.nvim_get_current_buf() == changes, 'the cursor is in the changes')
  check(vim.bo[changes].filetype == 'diff', 'the changes are a diff')
  result.listed = lines(changes)
  local hunks = hunk_lines(changes)
  check(#hunks == 3, #hunks .. ' hunks listed, not 3 (two in far.py, gone.py deleted)')
  check(text():find("+v27 = 'twenty-seven'", 1, true), 'the hunk lines are shown')
  check(text():find('diff gone.py (deleted)', 1, true), 'the deleted file is listed')
  check(vim.api.nvim_win_get_cursor(0)[1] == hunks[1], 'the cursor starts on the first hunk')

  -- <CR> on the deleted file's hunk opens nothing: the file is gone.
  vim.api.nvim_win_set_cursor(0, { hunks[3], 0 })
  vim.api.nvim_feedkeys(vim.keycode('<CR>'), 'x', false)
  check(vim.api.nvim_get_current_buf() == changes, '<CR> on a deleted file stayed in the changes')
  check(#noted('deleted by the turn; u brings it back') == 1, '<CR> said the file was deleted')

  -- A `K` the server refuses (far.py changed since the listing) is not marked: listed again.
  vim.api.nvim_buf_set_lines(far, 28, 29, false, { "v27 = 'twenty-eight'" })
  vim.wait(500) -- Neovim's didChange debounce (150 ms)
  vim.api.nvim_win_set_cursor(0, { hunks[2], 0 })
  vim.api.nvim_feedkeys('K', 'x', false)
  wait(10000, function()
    return text():find("+v27 = 'twenty-eight'", 1, true) ~= nil
  end, 'the changes to be listed again after the refused keep')
  check(#noted('far.py was left as it is') == 1, 'the refusal was shown: ' .. vim.inspect(notes))
  vim.wait(200)
  check(#marks() == 0, 'a refused keep is not marked kept')

  -- `K` once listed again: marked, and the cursor moves to the next hunk.
  vim.api.nvim_buf_set_lines(far, 28, 29, false, { "v27 = 'twenty-seven'" })
  vim.wait(500)
  vim.api.nvim_feedkeys('R', 'x', false)
  wait(10000, function()
    return text():find("+v27 = 'twenty-seven'", 1, true) ~= nil
  end, 'R to list the changes again')
  hunks = hunk_lines(changes)
  vim.api.nvim_win_set_cursor(0, { hunks[2], 0 })
  vim.api.nvim_feedkeys('K', 'x', false)
  wait(5000, function()
    return #marks() == 1
  end, 'the kept hunk to be marked')
  check(vim.api.nvim_win_get_cursor(0)[1] == hunks[3], 'K moved to the next hunk')
  check(marks()[1][2] == hunks[2] - 1, 'the kept hunk is the one marked')

  -- `uu` on the two inserted lines above the kept hunk: one undo, the second `u` ignored while
  -- it runs; the kept hunk moves up two lines and stays marked.
  vim.api.nvim_win_set_cursor(0, { hunks[1], 0 })
  vim.api.nvim_feedkeys('uu', 'x', false)
  wait(10000, function()
    return #hunk_lines(changes) == 2
  end, 'the changes to be listed again after the undo')
  vim.wait(300) -- a second undo, were it sent, would be answered by now
  result.relisted = lines(changes)
  result.after_undo = lines(far)
  check(#noted('still waiting') == 1, 'the second u was ignored with a message')
  check(#noted('undid a change') == 1, 'one undo: ' .. vim.inspect(notes))
  check(#noted('left as it is') == 1, 'the second u sent nothing: ' .. vim.inspect(notes))
  check(
    vim.deep_equal(
      lines(far),
      vim.list_extend(vim.list_slice(before, 1, 26), {
        "v27 = 'twenty-seven'",
        unpack(before, 28),
      })
    ),
    'only the two inserted lines went: ' .. vim.inspect(lines(far))
  )
  hunks = hunk_lines(changes)
  check(text():find("+v27 = 'twenty-seven'", 1, true), 'the kept hunk is still listed')
  check(#marks() == 1 and marks()[1][2] == hunks[1] - 1, 'and still marked kept')

  -- `u` on the deleted file brings it back.
  vim.api.nvim_win_set_cursor(0, { hunks[2], 0 })
  vim.api.nvim_feedkeys('u', 'x', false)
  wait(10000, function()
    return #hunk_lines(changes) == 1
  end, 'the changes to be listed again after undoing the deletion')
  check(vim.deep_equal(vim.fn.readfile(GONE), { 'gone = True' }), 'gone.py is back')
  check(#marks() == 1, 'the kept hunk is still marked')

  -- <CR> on the remaining hunk's changed line opens the file there.
  vim.api.nvim_win_set_cursor(0, { hunk_lines(changes)[1], 0 })
  vim.fn.search('^+v27', 'W')
  vim.api.nvim_feedkeys(vim.keycode('<CR>'), 'x', false)
  check(vim.api.nvim_get_current_buf() == far, '<CR> opened the file')
  check(
    vim.api.nvim_win_get_cursor(0)[1] == 27,
    "<CR> put the cursor on the hunk's line: " .. vim.api.nvim_win_get_cursor(0)[1]
  )

  -- A new turn in the session: the listing is out of date, and `u` is refused.
  vim.cmd('ComposerChat anything else?')
  wait_turn(2)
  check(lines(changes)[1]:find('Out of date', 1, true), 'the changes say they are out of date')
  vim.api.nvim_set_current_win(vim.fn.bufwinid(changes))
  vim.api.nvim_win_set_cursor(0, { hunk_lines(changes)[1], 0 })
  vim.api.nvim_feedkeys('u', 'x', false)
  vim.wait(300)
  check(#noted('out of date') == 1, 'u was refused with a message')
  check(lines(far)[27] == "v27 = 'twenty-seven'", 'and undid nothing')
  check(#noted('undid a change') == 2, 'no undo was sent')
end

function S.fix()
  local buf = start()
  local ns = vim.api.nvim_create_namespace('composer-test')
  vim.diagnostic.set(ns, buf, {
    {
      lnum = 0,
      col = 0,
      end_col = 5,
      message = "'(' was never closed",
      source = 'ruff',
      severity = 1,
    },
  })
  vim.api.nvim_win_set_cursor(0, { 1, 2 })
  vim.cmd('ComposerFix')
  check(vim.api.nvim_get_current_buf() == buf, 'the cursor stays in the file')
  check(vim.fn.bufwinid('composer://chat') ~= -1, 'the chat shows the fix')
  local turn = wait_turn(1)
  check(turn.stopReason == 'end_turn', 'stopReason ' .. tostring(turn.stopReason))
  check(type(turn.sessionId) == 'string', 'the command answered with its session')
  check(chat_text():find('Fixed it.', 1, true), 'the fix turn streamed into the chat')
end

function S.unsandboxed()
  -- composer-lsp runs where bwrap and unshare fail (tests/editors/test_nvim.py stubs them)
  local notes, notify = {}, vim.notify
  vim.notify = function(msg, level)
    notes[#notes + 1] = { msg = msg, level = level }
    notify(msg, level)
  end
  start()
  local asked = answer_permissions('reject_once')
  wait(10000, function()
    return require('composer').status() ~= ''
  end, 'composer/isolation')
  local warned = vim.tbl_filter(function(n)
    return n.level == vim.log.levels.WARN and n.msg:find('weaker than bubblewrap', 1, true) ~= nil
  end, notes)
  check(
    #warned == 1,
    'warned once at start that the sandbox is weaker, not ' .. #warned .. ' times'
  )
  vim.cmd('ComposerChat make a file') -- agent mode: the rules would allow this command
  local turn = wait_turn(1)
  result.asked = asked
  check(turn.stopReason == 'end_turn', 'stopReason ' .. tostring(turn.stopReason))
  check(#asked == 1, 'asked once, not ' .. #asked .. ' times')
  check(asked[1].prompt:find("sandbox isolation 'none'", 1, true), 'the question states the level')
  check(not vim.tbl_contains(asked[1].options, 'Always allow'), 'no "Always allow" is offered')
  check(chat_text():find('$ echo made > made.txt', 1, true), 'the chat shows the whole command')
  check(vim.fn.filereadable(ctx.ws .. '/made.txt') == 0, 'the rejected command never ran')
end

function S.live_output()
  -- A command that prints, sleeps, prints: its status line shows the first output while it
  -- runs, and the final output lands once, not once per live update.
  start()
  answer_permissions('allow_once')
  vim.cmd('ComposerChat run the steps')
  wait(20000, function()
    return chat_text():find('[running] — first step done', 1, true) ~= nil
  end, 'the running command shows its output on its status line')
  local turn = wait_turn(1)
  check(turn.stopReason == 'end_turn', 'stopReason ' .. tostring(turn.stopReason))
  local chat = chat_text()
  result.chat = chat
  check(
    chat:find('[done]', 1, true) and not chat:find('[done] —', 1, true),
    'the done line drops the live output'
  )
  local _, firsts = chat:gsub('\n    first step done\n', '') -- an output line, not the command's
  check(firsts == 1, 'the output is shown once, not ' .. firsts .. ' times')
  check(chat:find('second step done', 1, true), 'the final output is shown')
end

local start_ns = vim.uv.hrtime()
local ok, err = xpcall(S[ctx.scenario], debug.traceback)
result.ok, result.error = ok, not ok and tostring(err) or nil
result.seconds = (vim.uv.hrtime() - start_ns) / 1e9
result.chat = chat_text()
result.turns = turns
result.status = require('composer').status() -- the sandbox level, as a statusline would show it
local file = assert(io.open(ctx.result, 'w'))
file:write(vim.json.encode(result))
file:close()
for _, client in ipairs(vim.lsp.get_clients({ name = 'composer' })) do
  client:stop()
end
vim.wait(3000, function()
  return #vim.lsp.get_clients({ name = 'composer' }) == 0
end, 20)
os.exit(ok and 0 or 1)
