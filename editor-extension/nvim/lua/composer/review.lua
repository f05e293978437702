-- The proposal review of a revisable `session/request_permission` (:help composer-review): a tab
-- with the file's current text (`composer://current/<n>/<file>`, read-only) beside the proposed
-- new text (`composer://proposal/<n>/<file>`) in diff mode, <n> numbering the reviews so that two
-- of one file can be open at once. The proposal is a buffer like any other: edit it, then `:w`
-- typed in it (or :ComposerAccept) accepts it as it stands; closing it unwritten gives it up.

local Review = {}
local H = {}

--- Reviews opened so far: the <n> of the buffer names.
H.count = 0

--- Ex commands that accept the proposal when typed in its window: a write of this one buffer.
--- `:wall` and its kin (`:wqall`, `:xall`), as autosave runs them, never do.
H.accepting = { write = true, wq = true, xit = true, exit = true, update = true }

--- Opens the review of `diff` (a tool call's content item: { path, oldText, newText }) and calls
--- `on_done(text)` once: with the proposal's whole text when the person accepts it, or with nil
--- when they close it unwritten. Buffer names are relative to `root` where the file is under it.
--- Returns a handle whose `close()` closes the review without calling `on_done` (the question
--- went away), and whose `modified()` says whether the person changed the proposal.
---@param diff { path: string, oldText: string?, newText: string }
---@param root? string
---@param on_done fun(text: string?)
---@return { close: fun(), modified: fun(): boolean, name: string }
function Review.open(diff, root, on_done)
  local name = root and vim.fs.relpath(root, diff.path) or vim.fn.fnamemodify(diff.path, ':~:.')
  H.count = H.count + 1
  local prefix = ('composer://%%s/%d/%s'):format(H.count, name)
  local from = vim.api.nvim_get_current_tabpage()
  local bufs = {}
  local ok, err = pcall(H.build, diff, prefix, from, bufs)
  if not ok then
    -- A FileType hook or a window command failed half-way: leave no buffer or tab behind.
    H.close(bufs, from)
    error(err, 0)
  end
  local current, proposal = bufs[1], bufs[2]

  local finished = false
  local function text()
    return H.text(proposal, diff.newText)
  end
  local function finish(result)
    if finished then
      return
    end
    finished = true
    -- Scheduled: `:wq` still closes a window after its write, and closing the review's windows
    -- under it would make that another window (the last one would quit Neovim).
    vim.schedule(function()
      H.close(bufs, from)
      on_done(result)
    end)
  end

  -- The command line typed in the proposal's window, for the write it runs next: only a typed
  -- `:w` accepts, not the `:wall` of an autosave or a plugin's write. Forgotten once it ran.
  local typed
  vim.api.nvim_create_autocmd('CmdlineLeave', {
    buffer = proposal,
    callback = function()
      if vim.v.event.cmdtype ~= ':' or vim.v.event.abort then
        return
      end
      local parsed_ok, parsed = pcall(vim.api.nvim_parse_cmd, vim.fn.getcmdline(), {})
      typed = parsed_ok and parsed.cmd or nil
      vim.schedule(function()
        typed = nil
      end)
    end,
  })
  vim.api.nvim_create_autocmd('BufWriteCmd', {
    buffer = proposal,
    desc = 'Composer: accept the proposal as it stands (a typed :w)',
    callback = function(args)
      local target = vim.fn.expand('<amatch>')
      if target ~= vim.api.nvim_buf_get_name(proposal) then
        return H.write_copy(text(), target) -- `:w {file}`: a copy, which accepts nothing
      end
      if not H.accepting[typed or ''] then
        return H.notify(
          'the proposal was not accepted: only :w typed in it (or :ComposerAccept) accepts it',
          vim.log.levels.WARN
        )
      end
      typed = nil
      vim.bo[args.buf].modified = false
      finish(text())
    end,
  })
  -- `:e!` "reverts" the proposal to what the agent proposed (rather than to nothing: it has no
  -- file to read), and the current text to itself.
  for buf, restore in pairs({ [current] = diff.oldText, [proposal] = diff.newText }) do
    vim.api.nvim_create_autocmd('BufReadCmd', {
      buffer = buf,
      desc = 'Composer: restore the proposal as proposed',
      callback = function()
        H.fill(buf, type(restore) == 'string' and restore or '')
      end,
    })
  end
  vim.api.nvim_buf_create_user_command(proposal, 'ComposerAccept', function()
    vim.bo[proposal].modified = false
    finish(text())
  end, { desc = 'Composer: accept the proposal as it stands' })
  -- bufhidden=wipe (H.scratch): every way of closing the proposal ends here. `:x` typed in an
  -- unchanged proposal writes nothing but means what `:wq` means: accept.
  vim.api.nvim_create_autocmd('BufWipeout', {
    buffer = proposal,
    once = true,
    callback = function()
      local exit = (typed == 'xit' or typed == 'exit') and not vim.bo[proposal].modified
      finish(exit and text() or nil)
    end,
  })

  return {
    name = name,
    close = function()
      finished = true
      H.close(bufs, from)
    end,
    modified = function()
      return vim.api.nvim_buf_is_valid(proposal) and vim.bo[proposal].modified
    end,
  }
end

--- Makes the review's buffers (into `bufs`, as made: current, proposal) and its tab.
function H.build(diff, prefix, from, bufs)
  -- oldText is JSON null (vim.NIL) for a new file: the proposal is then diffed against nothing.
  local old = type(diff.oldText) == 'string' and diff.oldText or ''
  local current = H.scratch(prefix:format('current'), old)
  bufs[1] = current
  vim.bo[current].modifiable = false
  local proposal = H.scratch(prefix:format('proposal'), diff.newText)
  bufs[2] = proposal
  -- acwrite: `:w` runs the BufWriteCmd of Review.open instead of writing a file, and a changed
  -- proposal is not closed by a plain `:q` (E37), so edits are not dropped by accident.
  vim.bo[proposal].buftype = 'acwrite'
  vim.bo[proposal].modified = false
  local filetype = vim.filetype.match({ buf = proposal, filename = diff.path }) or ''
  for _, buf in ipairs({ current, proposal }) do
    vim.bo[buf].filetype = filetype
  end
  vim.cmd('tab sbuffer ' .. current)
  vim.cmd.diffthis()
  vim.cmd('vertical rightbelow sbuffer ' .. proposal)
  vim.cmd.diffthis()
  assert(vim.api.nvim_get_current_tabpage() ~= from, 'the review tab did not open')
end

--- `:w {file}` from the proposal: writes its text to {file} as `:w` would (E13 where it exists,
--- unless `:w!`), and says that this accepted nothing.
---@param text string
---@param target string
function H.write_copy(text, target)
  if vim.fn.filereadable(target) == 1 and vim.v.cmdbang == 0 then
    return H.notify(('E13: %s exists (add ! to override)'):format(target), vim.log.levels.ERROR)
  end
  if vim.fn.writefile(vim.split(text, '\n', { plain = true }), target, 'b') ~= 0 then
    return H.notify('could not write ' .. target, vim.log.levels.ERROR)
  end
  H.notify(
    ('wrote a copy of the proposal to %s; that does not accept it (:w does)'):format(target),
    vim.log.levels.INFO
  )
end

function H.notify(message, level)
  vim.notify('Composer: ' .. message, level)
end

--- A buffer named `name` holding `text`, wiped when no window shows it.
function H.scratch(name, text)
  local buf = vim.api.nvim_create_buf(false, true)
  vim.api.nvim_buf_set_name(buf, name)
  vim.bo[buf].bufhidden = 'wipe'
  -- No undo for the filling itself: `u` must not empty the proposal.
  local undolevels = vim.bo[buf].undolevels
  vim.bo[buf].undolevels = -1
  H.fill(buf, text)
  vim.bo[buf].undolevels = undolevels
  return buf
end

--- Sets the lines of `buf` to `text` (read-only or not) and marks it unmodified.
---@param buf integer
---@param text string
function H.fill(buf, text)
  local modifiable = vim.bo[buf].modifiable
  vim.bo[buf].modifiable = true
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, H.lines(text))
  vim.bo[buf].modifiable = modifiable
  vim.bo[buf].modified = false
end

--- The lines of `text`; a final newline ends the last line rather than starting an empty one.
---@param text string
---@return string[]
function H.lines(text)
  local lines = vim.split(text, '\n', { plain = true })
  if #lines > 1 and lines[#lines] == '' then
    table.remove(lines)
  end
  return lines
end

--- The text of `buf`, ending with a newline where `like` (the proposal's newText) does: a buffer's
--- lines do not say, and a person editing lines does not mean to add or drop the final newline.
---@param buf integer
---@param like string
---@return string
function H.text(buf, like)
  local text = table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), '\n')
  return vim.endswith(like, '\n') and text .. '\n' or text
end

--- Wipes the review's buffers (which closes their windows, and so the tab) and goes back to the
--- tab the review came from.
---@param bufs integer[]
---@param from integer
function H.close(bufs, from)
  for _, buf in ipairs(bufs) do
    if vim.api.nvim_buf_is_valid(buf) then
      vim.api.nvim_buf_delete(buf, { force = true })
    end
  end
  if vim.api.nvim_tabpage_is_valid(from) then
    vim.api.nvim_set_current_tabpage(from)
  end
end

return Review
